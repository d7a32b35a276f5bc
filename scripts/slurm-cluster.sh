#!/usr/bin/env bash
# A real three-node Slurm cluster on loopback, for development and tests.
#
#   scripts/slurm-cluster.sh up       install what is missing, start everything (idempotent)
#   scripts/slurm-cluster.sh down     stop everything this script started
#   scripts/slurm-cluster.sh status   print daemon and node states
#   scripts/slurm-cluster.sh env      print the environment clients need
#   scripts/slurm-cluster.sh clear-jobs   cancel every job the cluster still holds
#   scripts/slurm-cluster.sh add-user NAME   give NAME a private directory in the shared store
#
# Everything lives under CLAWPOINT_SLURM_DIR (default /var/lib/clawpoint-slurm): its own
# slurm.conf, its own munged (own key and socket), spool, logs, pid files, the JWT key and
# the shared checkpoint directory every node sees. A system Slurm or munge is never touched:
# the daemons use non-default ports and the clients find this cluster through SLURM_CONF,
# which `up` writes to $DIR/env (source it).
#
# Nodes n1..n3 are three `slurmd -N` on this host. Partitions: `debug` (n1-n3, default) and
# `gpu` (n3, with two GRES "gpu" that are only counted, not bound to devices).
# Nodes n4 and n5 (partition `elastic`) use Slurm's power saving: they are CLOUD nodes that
# start powered down; $DIR/bin/resume starts a node's slurmd and $DIR/bin/suspend stops it
# (Slurm runs them on `scontrol update nodename=N state=POWER_UP|POWER_DOWN`, and resumes a
# node by itself when a pending job needs it). Slurm never suspends them on its own (a
# SuspendTime of a year): clawpoint decides when, after saving the work on them.
# A power-down takes SuspendTimeout (3 s) and then the power-save thread's next look
# (power_save_interval, 1 s here; 10 by default): about 5 s instead of 11, which the pool
# tests wait out at every shrink and fixture.
# A job whose begin time passes with nothing else happening waits for a periodic scheduling
# pass (the main loop's sched_interval, 60 s by default; the backfill's 30 s, when something
# changed): 2 s here, so such a start takes 2-4 s, not up to half a minute (a standby test,
# requeued with a begin time 2 s ahead, started 29 s later; jobs submitted with --begin=now+2
# started 2-19 s later with the defaults, 2.5-4.0 s with this).
# slurmrestd runs as the system user clawpoint-rest: one instance on a unix socket
# (rest_auth/local) and one on TCP 127.0.0.1 with JWT (rest_auth/jwt).
# Works with Debian 12 (Slurm 22.05) and Debian 13 (Slurm 24.11). Needs root.
set -euo pipefail

DIR="${CLAWPOINT_SLURM_DIR:-/var/lib/clawpoint-slurm}"
CTLD_PORT="${CLAWPOINT_SLURM_CTLD_PORT:-16817}"
REST_PORT="${CLAWPOINT_SLURM_REST_PORT:-16820}"
REST_USER="clawpoint-rest"
NODES=(n1 n2 n3)
ELASTIC=(n4 n5)
CONF="$DIR/etc/slurm.conf"
MUNGE_SOCKET="$DIR/munge/munge.socket"
REST_SOCKET="$DIR/rest/slurmrestd.sock"
export SLURM_CONF="$CONF"

log() { printf 'slurm-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

alive() { # alive PIDFILE: the pid in the file names a running process
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

need_root() { [[ $EUID -eq 0 ]] || die "run as root (it starts slurmctld, slurmd and munged)"; }

plugin_dir() { # where Debian puts Slurm's plugins (multiarch path)
    local d
    for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm; do
        [[ -d "$d" ]] && { printf '%s' "$d"; return 0; }
    done
    printf '/nonexistent'
}

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sinfo >/dev/null || missing+=(slurm-client)
    command -v slurmrestd >/dev/null || missing+=(slurmrestd)
    command -v munged >/dev/null || missing+=(munge)
    [[ -e "$(plugin_dir)/auth_jwt.so" ]] || missing+=(slurm-wlm-jwt-plugin)
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "installing slurm-wlm slurmrestd munge (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    # Only refresh the package lists when apt does not know the packages yet.
    if ! apt-cache show slurm-wlm slurmrestd munge >/dev/null 2>&1; then
        apt-get update -qq
    fi
    apt-get install -y -qq --no-install-recommends slurm-wlm slurmrestd munge >/dev/null
    # JWT (for slurmrestd over TCP) is a separate package; without it only the unix socket runs.
    if [[ ! -e "$(plugin_dir)/auth_jwt.so" ]]; then
        apt-get install -y -qq --no-install-recommends slurm-wlm-jwt-plugin >/dev/null ||
            log "warning: slurm-wlm-jwt-plugin not installable: no slurmrestd on TCP"
    fi
}

have_jwt() { [[ -e "$(plugin_dir)/auth_jwt.so" ]]; }

make_dirs() {
    mkdir -p "$DIR"/{etc,spool/ctld,log,run,checkpoints,munge,rest}
    mkdir -p "$DIR/bin"
    for n in "${NODES[@]}" "${ELASTIC[@]}"; do mkdir -p "$DIR/spool/d/$n"; done
    chmod 755 "$DIR" "$DIR/etc" "$DIR/run"
    # The shared store: root's, readable by none but root; each user's checkpoints live in
    # checkpoints/USER (0700, owned by the user), which `add-user` creates: no user can read,
    # list, plant in or squat another's (docs/slurm.md, "Many users").
    chown root:root "$DIR/checkpoints"
    chmod 0711 "$DIR/checkpoints"
    add_user root
    id -u "$REST_USER" >/dev/null 2>&1 ||
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$REST_USER"
    chown munge:munge "$DIR/munge"
    # Traversable by all (clients of any uid reach the socket), listable by munge only.
    chmod 711 "$DIR/munge"
    chown "$REST_USER" "$DIR/rest"
    chmod 755 "$DIR/rest"
}

make_keys() {
    if [[ ! -s "$DIR/munge/munge.key" ]]; then
        head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
    fi
    chown munge:munge "$DIR/munge/munge.key"
    chmod 400 "$DIR/munge/munge.key"
    if [[ ! -s "$DIR/etc/jwt_hs256.key" ]]; then
        head -c 32 /dev/urandom >"$DIR/etc/jwt_hs256.key"
    fi
    chown root:root "$DIR/etc/jwt_hs256.key"
    chmod 600 "$DIR/etc/jwt_hs256.key"
}

write_conf() {
    local host
    host="$(hostname)"
    local tmp="$CONF.tmp"
    cat >"$tmp" <<EOF
# Written by scripts/slurm-cluster.sh: a loopback cluster for clawpoint development.
ClusterName=clawpoint
SlurmctldHost=$host
SlurmctldPort=$CTLD_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
$(have_jwt && printf 'AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=%s\n' "$DIR/etc/jwt_hs256.key")
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
SlurmdTimeout=30
GresTypes=gpu
SuspendProgram=$DIR/bin/suspend
ResumeProgram=$DIR/bin/resume
SuspendTimeout=3
SlurmctldParameters=power_save_interval=1
ResumeTimeout=60
SuspendExcNodes=n[1-3]
PrivateData=cloud
NodeName=n[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=17001-17002 CPUs=2 RealMemory=2000 Feature=cpu State=UNKNOWN
NodeName=n3 NodeHostname=$host NodeAddr=127.0.0.1 Port=17003 CPUs=2 RealMemory=2000 Gres=gpu:2 Feature=cpu,gpu State=UNKNOWN
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP
NodeName=n[4-5] NodeHostname=$host NodeAddr=127.0.0.1 Port=17004-17005 CPUs=2 RealMemory=2000 Feature=cpu,elastic State=CLOUD
PartitionName=gpu Nodes=n3 MaxTime=INFINITE State=UP
PartitionName=elastic Nodes=n[4-5] MaxTime=INFINITE State=UP SuspendTime=31536000
EOF
    CONF_CHANGED=0
    cmp -s "$tmp" "$CONF" || CONF_CHANGED=1
    mv "$tmp" "$CONF"
    write_power_programs
    # Two placeholder device files: a count-only gpu GRES is not registered by 22.05's slurmd.
    printf 'NodeName=n3 Name=gpu File=/dev/null\nNodeName=n3 Name=gpu File=/dev/zero\n' \
        >"$DIR/etc/gres.conf"
    chmod 644 "$CONF" "$DIR/etc/gres.conf"
    cat >"$DIR/env" <<EOF
export SLURM_CONF=$CONF
export CLAWPOINT_SLURM_SOCKET=$REST_SOCKET
$(have_jwt && echo "export CLAWPOINT_SLURM_URL=http://127.0.0.1:$REST_PORT")
export CLAWPOINT_SLURM_CHECKPOINT_DIR=$DIR/checkpoints
EOF
    chmod 644 "$DIR/env"
}

write_power_programs() { # $DIR/bin/resume and suspend: what Slurm runs to power nodes up or down
    # $1 of each is a host list (n[4-5]); each node is a `slurmd -N` on this host.
    cat >"$DIR/bin/resume.tmp" <<EOF
#!/bin/sh
# Written by scripts/slurm-cluster.sh: Slurm's ResumeProgram for this loopback cluster.
export SLURM_CONF=$CONF
# Stdio on /dev/null: slurmctld runs this with them closed, and a slurmd started so gets its
# listening socket as fd 2 and hangs writing its log there. -b: report a reboot, which is how
# slurmctld knows that a node it powered up came up.
# The second's wait: slurmctld counts a powering-up node as booted only if its boot time
# (its clock's whole second at registration less the uptime slurmd reports) is no earlier
# than the second it asked for the power-up (node_mgr.c, waiting_for_node_boot); with -b,
# slurmd reports the whole seconds of uptime since its first uptime read (get_mach_stat.c,
# get_up_time). A slurmd started in the very second of the request whose uptime ticks over
# before it registers gives a boot time one second too early, and slurmctld waits for a
# boot that never comes until ResumeTimeout marks the node down (seen once in nine test
# runs). Started a second later, its boot time is never before the request.
# A node powered down a moment ago may still have its old slurmd on the way out (suspend
# below signals it; SuspendTimeout is short here): the new one starts once the old one has
# gone, so it can bind the node's port.
sleep 1
for n in \$(scontrol show hostnames "\$1"); do
    f=$DIR/run/slurmd-\$n.pid
    i=0
    while [ -s "\$f" ] && kill -0 "\$(cat "\$f")" 2>/dev/null && [ \$i -lt 100 ]; do
        sleep 0.1; i=\$((i + 1))
    done
    slurmd -b -f $CONF -N "\$n" </dev/null >/dev/null 2>&1
done
exit 0
EOF
    cat >"$DIR/bin/suspend.tmp" <<EOF
#!/bin/sh
# Written by scripts/slurm-cluster.sh: Slurm's SuspendProgram for this loopback cluster.
export SLURM_CONF=$CONF
for n in \$(scontrol show hostnames "\$1"); do
    f=$DIR/run/slurmd-\$n.pid
    [ -s "\$f" ] && kill -TERM "\$(cat "\$f")" 2>/dev/null
done
exit 0
EOF
    chmod 755 "$DIR/bin/resume.tmp" "$DIR/bin/suspend.tmp"
    mv "$DIR/bin/resume.tmp" "$DIR/bin/resume"
    mv "$DIR/bin/suspend.tmp" "$DIR/bin/suspend"
}

start_munge() {
    alive "$DIR/munge/munged.pid" && return 0
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed" --force
}

start_slurm() {
    if ! alive "$DIR/run/slurmctld.pid"; then
        slurmctld -f "$CONF"
    fi
    for n in "${NODES[@]}"; do
        alive "$DIR/run/slurmd-$n.pid" || slurmd -f "$CONF" -N "$n"
    done
}

rest_plugins() {
    # 22.05 offers openapi/v0.0.3x (and dbv0.0.3x, which needs slurmdbd); 24.11 offers
    # openapi/slurmctld. Load every controller plugin on offer and no accounting one.
    local list
    list="$(setpriv --reuid="$REST_USER" --regid="$REST_USER" --init-groups -- env SLURM_CONF="$CONF" slurmrestd -f "$CONF" -s list 2>&1 || true)"
    local plugins
    plugins="$(grep -oE 'openapi/(v[0-9.]+|slurmctld)' <<<"$list" | sort -u | paste -sd, -)"
    [[ -n "$plugins" ]] || die "slurmrestd offers no openapi plugin: $list"
    printf '%s' "$plugins"
}

as_rest() { # run a command as the REST user, exec'd so that $! is its pid
    # No setsid: it would fork when we lead a process group, and $! would name the wrong pid.
    exec setpriv --reuid="$REST_USER" --regid="$REST_USER" --init-groups -- "$@"
}

start_rest() {
    local plugins
    plugins="$(rest_plugins)"
    if ! alive "$DIR/run/slurmrestd-unix.pid"; then
        rm -f "$REST_SOCKET"
        as_rest env SLURM_CONF="$CONF" slurmrestd -f "$CONF" -a rest_auth/local -s "$plugins" "unix:$REST_SOCKET" \
            </dev/null >>"$DIR/log/slurmrestd-unix.log" 2>&1 &
        echo $! >"$DIR/run/slurmrestd-unix.pid"
    fi
    if have_jwt && ! alive "$DIR/run/slurmrestd-tcp.pid"; then
        # SLURM_JWT=daemon: slurmrestd forwards each client's token to slurmctld.
        as_rest env SLURM_CONF="$CONF" SLURM_JWT=daemon slurmrestd -f "$CONF" -a rest_auth/jwt -s "$plugins" "127.0.0.1:$REST_PORT" \
            </dev/null >>"$DIR/log/slurmrestd-tcp.log" 2>&1 &
        echo $! >"$DIR/run/slurmrestd-tcp.pid"
    fi
}

wait_ready() {
    local i
    # slurmctld writes its pid file once it has read its state, which under load takes a
    # while (and a controller that was just stopped may still hold its port briefly).
    for i in $(seq 1 150); do alive "$DIR/run/slurmctld.pid" && break; sleep 0.2; done
    alive "$DIR/run/slurmctld.pid" || die "slurmctld did not start: see $DIR/log/slurmctld.log"
    for i in $(seq 1 100); do
        # Ready: every node answers (no unknown/down/not-responding) and the socket exists.
        if [[ "$(timeout 5 sinfo -h -N -p debug -o '%t' 2>/dev/null | grep -cvE 'unk|down|\*|^$')" -ge 3 ]] &&
            [[ -S "$REST_SOCKET" ]]; then
            return 0
        fi
        sleep 0.2
    done
    log "nodes not all up yet:"
    timeout 5 sinfo -N >&2 || true
}

up() {
    need_root
    install_packages
    make_dirs
    make_keys
    write_conf
    start_munge
    local was_running=0
    alive "$DIR/run/slurmctld.pid" && was_running=1
    start_slurm
    start_rest
    wait_ready
    # A cluster left running by an older checkout keeps its old settings until told.
    if (( was_running && CONF_CHANGED )); then
        log "slurm.conf changed: reconfiguring the running cluster"
        scontrol reconfigure
    fi
    cat "$DIR/env"
}

stop_pidfile() { # stop_pidfile FILE: TERM, then KILL after a few seconds
    local f="$1" pid i
    [[ -s "$f" ]] || return 0
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

down() {
    need_root
    [[ -d "$DIR" ]] || return 0
    stop_pidfile "$DIR/run/slurmrestd-unix.pid"
    stop_pidfile "$DIR/run/slurmrestd-tcp.pid"
    # One RPC stops the controller and every slurmd at once (fast); pid files catch the rest.
    alive "$DIR/run/slurmctld.pid" && timeout 5 scontrol shutdown >/dev/null 2>&1 || true
    for n in "${NODES[@]}" "${ELASTIC[@]}"; do stop_pidfile "$DIR/run/slurmd-$n.pid"; done
    stop_pidfile "$DIR/run/slurmctld.pid"
    stop_pidfile "$DIR/munge/munged.pid"
    rm -f "$REST_SOCKET"
    log "stopped"
}

status() {
    local name f rc=0
    for name in munged slurmctld slurmd-n1 slurmd-n2 slurmd-n3 slurmrestd-unix slurmrestd-tcp; do
        case "$name" in
            munged) f="$DIR/munge/munged.pid" ;;
            *) f="$DIR/run/$name.pid" ;;
        esac
        if alive "$f"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: stopped"; rc=1; fi
    done
    if [[ -f "$CONF" ]]; then sinfo -N -o '%N %P %t %E' 2>&1 || rc=1; fi
    return $rc
}

add_user() { # add_user NAME: the user's own directory of the shared store, 0700
    local user="$1" d="$DIR/checkpoints/$1"
    id -u "$user" >/dev/null 2>&1 || die "no user $user"
    if [[ -L "$d" ]] || { [[ -e "$d" ]] && [[ "$(stat -c %U "$d")" != "$user" ]]; }; then
        die "$d exists and is not $user's directory: remove it first"
    fi
    mkdir -p "$d"
    chown "$user:$(id -gn "$user")" "$d"
    chmod 0700 "$d"
}

# slurmctld saves its jobs and recovers them when it starts again: a test run killed before
# its end leaves its jobs to the next one, where they hold nodes (seen: an earlier run's
# `sleep 600`, requeued onto n1, kept an --exclusive job off it for the whole next run).
clear_jobs() {
    need_root
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null) || return 0
    [[ -z $jobs ]] && return 0
    # shellcheck disable=SC2086 # one argument per job id
    scancel $jobs || true
    log "cancelled $(wc -w <<<"$jobs") job(s) left from before"
}

case "${1:-}" in
    add-user) need_root; [[ -n "${2:-}" ]] || die "usage: $0 add-user NAME"; add_user "$2" ;;
    up) up ;;
    down) down ;;
    status) status ;;
    env) cat "$DIR/env" ;;
    clear-jobs) clear_jobs ;;
    *) echo "usage: $0 up|down|status|env|clear-jobs|add-user NAME" >&2; exit 2 ;;
esac
