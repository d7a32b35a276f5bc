#!/usr/bin/env bash
# Install the system packages clawpoint's tests and demo need on Debian 12 or 13, idempotently.
# Fast path: every check below is a cheap probe; apt runs only for what is missing.
#   scripts/install-system-deps.sh            # base: python venv, CRIU >= 4.2.1
#   scripts/install-system-deps.sh --all      # + Slurm, Chromium (approval page tests), and
#                                             #   the real servers of tests/workloads/test_real_software.py
# The servers' packages (Redis, nginx, MariaDB, PostgreSQL, Node.js) are installed for their
# binaries only: the tests start their own instances on loopback ports in temporary
# directories. A service this script installs is neither started (policy-rc.d during the
# install) nor left enabled; a service that was already installed is left as it was.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
want_all=0
[[ ${1:-} == --all ]] && want_all=1

log() { printf 'install-system-deps: %s\n' "$*" >&2; }
if [[ $(id -u) -ne 0 ]]; then
  log "not root: skipping system packages (CRIU and Slurm tests will be skipped with a reason)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
missing=()
need() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || missing+=("$1"); }
python3 -c 'import ensurepip' 2>/dev/null || need python3-venv
command -v unshare >/dev/null || need util-linux
command -v ip >/dev/null || need iproute2
command -v dd >/dev/null || need coreutils
# core.wrapper.connection_hold: a moving server's new connections wait, not refused
command -v iptables-legacy >/dev/null || need iptables
if (( want_all )); then
  command -v chromium >/dev/null || need chromium
  command -v sqlite3 >/dev/null || need sqlite3
  command -v systemd-analyze >/dev/null || need systemd   # verifies contrib/systemd units
  command -v shellcheck >/dev/null || need shellcheck     # checks scripts/kind-live.sh
  # tests/workloads/test_real_software.py
  command -v redis-server >/dev/null || need redis-server
  [[ -x /usr/sbin/nginx ]] || need nginx-light
  [[ -x /usr/sbin/mariadbd ]] || need mariadb-server
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need postgresql
  command -v node >/dev/null || need nodejs
fi
services=()
for pkg in "${missing[@]}"; do
  case $pkg in
    redis-server) services+=(redis-server) ;;
    nginx-light) services+=(nginx) ;;
    mariadb-server) services+=(mariadb) ;;
    postgresql) services+=(postgresql) ;;
  esac
done
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  apt-get update -qq
  export CLAWPOINT_APT_UPDATED=1
  own_policy=0
  if (( ${#services[@]} )) && [[ ! -e /usr/sbin/policy-rc.d ]]; then
    # invoke-rc.d asks this before starting a service from a package's postinst: 101 = no.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  status=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  (( own_policy )) && rm -f /usr/sbin/policy-rc.d
  (( status == 0 )) || exit "$status"
  for svc in "${services[@]}"; do
    if [[ -d /run/systemd/system ]]; then
      systemctl disable --now --quiet "$svc" 2>/dev/null || true
    elif command -v systemctl >/dev/null; then
      systemctl disable --quiet "$svc" 2>/dev/null || true   # no systemd running: the links
    fi
    if command -v update-rc.d >/dev/null; then
      update-rc.d "$svc" disable >/dev/null 2>&1 || true
    fi
  done
fi
"$here/install-criu.sh" || log "CRIU could not be installed: the cooperative engine still works"
