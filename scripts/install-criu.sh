#!/usr/bin/env bash
# Install CRIU >= 4.2.1 on Debian 12 or 13, idempotently.
#
# Why 4.2.1: CRIU before 4.1 fails on kernels >= 6.13 ("vdso: Unexpected rt vDSO area
# bounds"), and CRIU 4.1.x cannot dump any process holding a TCP socket on kernels >= 6.16
# ("sockets: Can't get 1:16 opt: Operation not supported": those kernels answer
# SO_PASSCRED/SO_PASSSEC only for AF_UNIX/NETLINK sockets). Debian 12 ships 3.17 and Debian 13
# ships 4.1.x, so where apt offers less than 4.2.1 we build the upstream tarball of the
# source package of a newer suite (sid by default), fetched through apt itself with a private
# configuration and checked against the sha256 that the suite's signed Sources index
# publishes for it (the same sums as the package's .dsc).
# Fast path: when criu >= the minimum is already on PATH, do nothing.
#
# Environment: CRIU_MIN_VERSION (default 4.2.1), CRIU_SOURCE_SUITE (default sid),
# CRIU_PREFIX (default /usr/local), CRIU_BUILD_CACHE (default /var/cache/clawpoint/criu).
set -euo pipefail

MIN_VERSION=${CRIU_MIN_VERSION:-4.2.1}
PREFIX=${CRIU_PREFIX:-/usr/local}
CACHE=${CRIU_BUILD_CACHE:-/var/cache/clawpoint/criu}
NEWER_SUITE=${CRIU_SOURCE_SUITE:-sid}

log() { printf 'install-criu: %s\n' "$*" >&2; }

# Debian version order ("4.2.1-1" > "4.2.1" > "4.2" > "4.1.1"); epochs stripped by callers.
version_ok() {
  [[ -n $1 ]] && dpkg --compare-versions "$1" ge "$MIN_VERSION"
}

installed_version() {
  command -v criu >/dev/null 2>&1 || return 1
  criu --version 2>/dev/null | awk '/^Version:/ {print $2; exit}'
}

if v=$(installed_version) && version_ok "$v"; then
  log "criu $v already installed (>= $MIN_VERSION)"
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

log "apt offers criu ${candidate:-none} (< $MIN_VERSION); building from $NEWER_SUITE's source package"
apt_update_once
apt-get install -y -qq --no-install-recommends build-essential pkg-config \
  libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf \
  libnl-3-dev libcap-dev libnet1-dev libbsd-dev libgnutls28-dev libaio-dev uuid-dev \
  libnftables-dev iproute2 xz-utils ca-certificates >/dev/null

# A private apt configuration that knows only the newer suite's deb-src, so the system's
# own sources and package lists are never touched.
work="$CACHE/apt-$NEWER_SUITE"
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
upstream=${src_version#*:}
upstream=${upstream%%-*}
[[ -n $upstream ]] || { log "$NEWER_SUITE publishes no criu source package"; exit 1; }
version_ok "$upstream" || { log "$NEWER_SUITE offers criu $upstream, still older than $MIN_VERSION"; exit 1; }
tarball="criu_${upstream}.orig.tar.xz"
expected=$(awk -v f="$tarball" '/^Checksums-Sha256:/ {on=1; next} /^[A-Z]/ {on=0} on && $3 == f {print $1; exit}' <<<"$showsrc")
[[ -n $expected ]] || { log "apt did not publish a sha256 for $tarball"; exit 1; }

cd "$CACHE/src"
if [[ ! -f $tarball ]] || [[ $(sha256sum "$tarball" | cut -d' ' -f1) != "$expected" ]]; then
  rm -f "$tarball"
  # Only the upstream tarball is needed; the mirror can lag on the .dsc revision, so ask
  # apt for the tarball's URI and fetch it with apt's own downloader, hash-checked.
  uri=$(apt-get "${apt_opts[@]}" source --print-uris criu 2>/dev/null \
        | awk -v f="$tarball" '$2 == f {gsub(/\047/, "", $1); print $1; exit}')
  [[ -n $uri ]] || { log "apt knows no URI for $tarball"; exit 1; }
  /usr/lib/apt/apt-helper download-file "$uri" "$CACHE/src/$tarball" "SHA256:$expected" \
    >/dev/null 2>"$CACHE/download.log" || { cat "$CACHE/download.log" >&2; exit 1; }
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
# An older criu earlier on PATH (say a distribution package in front of $PREFIX/sbin) would
# still be the one clawpoint runs: say so rather than report success.
if ! { v=$(installed_version) && version_ok "$v"; }; then
  log "criu on PATH ($(command -v criu || echo none)) reports ${v:-no version}, not >= $MIN_VERSION: put $PREFIX/sbin first on PATH"
  exit 1
fi
