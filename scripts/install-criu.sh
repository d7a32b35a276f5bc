#!/usr/bin/env bash
# Install CRIU >= 4.1 on Debian 12 or 13, idempotently.
#
# Debian 13 ships 4.1.x: apt installs it. Debian 12 ships 3.17, which fails on kernels
# >= 6.13 ("vdso: Unexpected rt vDSO area bounds"), so we build the newer suite's source
# package, fetched through apt itself and checked against the sha256 apt publishes for it.
# Fast path: when a working criu >= 4.1 is already on PATH, do nothing.
set -euo pipefail

MIN_MAJOR=4
MIN_MINOR=1
PREFIX=${CRIU_PREFIX:-/usr/local}
CACHE=${CRIU_BUILD_CACHE:-/var/cache/clawpoint/criu}
NEWER_SUITE=${CRIU_SOURCE_SUITE:-trixie}

log() { printf 'install-criu: %s\n' "$*" >&2; }

version_ok() {
  local v=$1 major minor
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  [[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] || return 1
  (( major > MIN_MAJOR || (major == MIN_MAJOR && minor >= MIN_MINOR) ))
}

installed_version() {
  command -v criu >/dev/null 2>&1 || return 1
  criu --version 2>/dev/null | awk '/^Version:/ {print $2; exit}'
}

if v=$(installed_version) && version_ok "$v"; then
  log "criu $v already installed"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  log "need root to install CRIU (run: sudo $0); the cooperative engine works without it"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_updated=${CLAWPOINT_APT_UPDATED:-0}
apt_update_once() {
  if [[ $apt_updated == 0 ]]; then apt-get update -qq; apt_updated=1; fi
}

candidate=$(apt-cache policy criu 2>/dev/null | awk '/Candidate:/ {print $2}')
if [[ -z $candidate || $candidate == "(none)" ]]; then
  apt_update_once
  candidate=$(apt-cache policy criu 2>/dev/null | awk '/Candidate:/ {print $2}')
fi
if [[ -n $candidate && $candidate != "(none)" ]] && version_ok "${candidate#*:}"; then
  log "installing criu $candidate from apt"
  apt-get install -y -qq criu >/dev/null
  exit 0
fi

log "apt offers criu ${candidate:-none} (< $MIN_MAJOR.$MIN_MINOR); building from $NEWER_SUITE's source package"
apt_update_once
apt-get install -y -qq --no-install-recommends build-essential pkg-config \
  libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf \
  libnl-3-dev libcap-dev libnet1-dev libbsd-dev libgnutls28-dev libaio-dev uuid-dev \
  libnftables-dev iproute2 xz-utils ca-certificates >/dev/null

# A private apt configuration that knows only the newer suite's deb-src, so the system's
# own sources and package lists are never touched.
work="$CACHE/apt"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$CACHE/src"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
cat > "$work/sources.list" <<SRC
deb-src [signed-by=$keyring] http://deb.debian.org/debian $NEWER_SUITE main
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
          -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update -qq
showsrc=$(apt-cache "${apt_opts[@]}" showsrc criu)
src_version=$(awk '/^Version:/ {print $2; exit}' <<<"$showsrc")
upstream=${src_version%%-*}
tarball="criu_${upstream}.orig.tar.xz"
expected=$(awk -v f="$tarball" '/^Checksums-Sha256:/ {on=1; next} /^[A-Z]/ {on=0} on && $3 == f {print $1; exit}' <<<"$showsrc")
[[ -n $expected ]] || { log "apt did not publish a sha256 for $tarball"; exit 1; }
version_ok "$upstream" || { log "$NEWER_SUITE offers criu $upstream, still too old"; exit 1; }

cd "$CACHE/src"
if [[ ! -f $tarball ]] || [[ $(sha256sum "$tarball" | cut -d' ' -f1) != "$expected" ]]; then
  rm -f "$tarball"
  # Only the upstream tarball is needed; the mirror can lag on the .dsc revision, so ask
  # apt for the tarball's URI and fetch it with apt's own downloader, hash-checked.
  uri=$(apt-get "${apt_opts[@]}" source --print-uris criu 2>/dev/null \
        | awk -v f="$tarball" '$2 == f {gsub(/\047/, "", $1); print $1; exit}')
  [[ -n $uri ]] || { log "apt knows no URI for $tarball"; exit 1; }
  /usr/lib/apt/apt-helper download-file "$uri" "$CACHE/src/$tarball" "SHA256:$expected" >/dev/null
fi
actual=$(sha256sum "$tarball" | cut -d' ' -f1)
if [[ $actual != "$expected" ]]; then
  log "sha256 mismatch for $tarball: expected $expected, got $actual"; exit 1
fi
log "verified $tarball ($actual)"

builddir="$CACHE/src/criu-$upstream"
rm -rf "$builddir"
tar -xJf "$tarball"
cd "$builddir"
make -j"$(nproc)" criu >"$CACHE/build.log" 2>&1 || { tail -30 "$CACHE/build.log" >&2; exit 1; }
install -m 0755 criu/criu "$PREFIX/sbin/criu"
hash -r
log "installed $("$PREFIX/sbin/criu" --version | awk '/^Version:/ {print $2}') to $PREFIX/sbin/criu"
"$PREFIX/sbin/criu" check >/dev/null 2>&1 && log "criu check: ok" || log "criu check failed: see 'criu check' output"
