#!/usr/bin/env bash
# Install the system packages clawpoint's tests and demo need on Debian 12 or 13, idempotently.
# Fast path: every check below is a cheap probe; apt runs only for what is missing.
#   scripts/install-system-deps.sh            # base: python venv, CRIU >= 4.2.1
#   scripts/install-system-deps.sh --all      # + Slurm, Chromium (approval page tests)
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
if (( want_all )); then
  command -v chromium >/dev/null || need chromium
  command -v sqlite3 >/dev/null || need sqlite3
  command -v systemd-analyze >/dev/null || need systemd   # verifies contrib/systemd units
  command -v shellcheck >/dev/null || need shellcheck     # checks scripts/kind-live.sh
fi
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  apt-get update -qq
  export CLAWPOINT_APT_UPDATED=1
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$here/install-criu.sh" || log "CRIU could not be installed: the cooperative engine still works"
