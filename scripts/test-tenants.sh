#!/usr/bin/env bash
# Two ordinary users for the multi-user tests, and a clawpoint installation they can run.
#
#   scripts/test-tenants.sh up      create the users and (re)install the venv (idempotent)
#   scripts/test-tenants.sh env     print where things are (sourced by tests/tenants)
#
# The users (clawpoint-alice, clawpoint-bob) have no sudo, no password and no special group:
# what they can do here is what any user of a shared node can. The venv lives under
# CLAWPOINT_TENANT_DIR (default /var/lib/clawpoint-tenants, mode 0755), is built from Debian's
# /usr/bin/python3 (the default python may live under /root, which other users cannot reach)
# and holds a plain (not editable) install of this checkout, refreshed on every `up`: the
# checkout itself may sit in a directory other users cannot enter. Dependencies come from
# constraints.txt and are installed again only when it changes. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${CLAWPOINT_TENANT_DIR:-/var/lib/clawpoint-tenants}"
USERS=(clawpoint-alice clawpoint-bob)
PY=/usr/bin/python3
log() { printf 'test-tenants: %s\n' "$*" >&2; }

up() {
    [[ $EUID -eq 0 ]] || { log "run as root (it creates users)"; exit 1; }
    for u in "${USERS[@]}"; do
        id -u "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --user-group "$u"
        chmod 0700 "$(getent passwd "$u" | cut -d: -f6)"
    done
    # Each user's private directory in the loopback Slurm cluster's shared store, if it runs.
    local slurm_dir="${CLAWPOINT_SLURM_DIR:-/var/lib/clawpoint-slurm}"
    if [[ -d "$slurm_dir/checkpoints" ]]; then
        for u in "${USERS[@]}"; do scripts/slurm-cluster.sh add-user "$u"; done
    fi
    [[ -x $PY ]] || { log "$PY missing: apt-get install python3 python3-venv"; exit 1; }
    $PY -c 'import ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv >/dev/null
    mkdir -p "$DIR"; chmod 0755 "$DIR"
    local venv="$DIR/venv" stamp="$DIR/venv/.deps-$(sha256sum constraints.txt pyproject.toml | sha256sum | cut -c1-16)"
    if [[ ! -e $stamp ]]; then
        log "building $venv (dependencies from constraints.txt)"
        rm -rf "$venv"
        $PY -m venv "$venv"
        "$venv/bin/python" -m pip install -q -c constraints.txt --upgrade pip 2> >(grep -v 'is ignored' >&2)
        "$venv/bin/python" -m pip install -q -c constraints.txt "$(pwd)" 2> >(grep -v 'is ignored' >&2)
        touch "$stamp"
    fi
    # This checkout's code, when it differs from what the venv holds (fast: no dependency
    # changes). Unchanged code is never reinstalled: a reinstall under a running test (another
    # pytest worker's session start) would pull files from under the users' processes.
    local code; code=$(find pyproject.toml core mcp_server -type f ! -path '*/__pycache__/*' -print0 |
        sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
    [[ -e "$venv/.code-$code" ]] && return 0
    local build; build=$(mktemp -d)
    cp -a pyproject.toml core mcp_server "$build"/ 2>/dev/null
    [[ -f README.md ]] && cp README.md "$build"/
    "$venv/bin/python" -m pip install -q --no-deps --force-reinstall --no-build-isolation "$build" >/dev/null 2>&1 ||
        "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$build" >/dev/null
    rm -rf "$build"
    chmod -R go+rX "$venv"
    rm -f "$venv"/.code-*
    touch "$venv/.code-$code"
}

case "${1:-up}" in
    up) up ;;
    env) printf 'CLAWPOINT_TENANT_VENV=%s\nCLAWPOINT_TENANT_USERS=%s\n' "$DIR/venv" "${USERS[*]}" ;;
    *) echo "usage: $0 up|env" >&2; exit 2 ;;
esac
