#!/usr/bin/env bash
# Check clawpoint's skills and MCP server with the real OpenClaw CLI.
#
# In a throwaway HOME (your own OpenClaw config is never touched) this:
#   1. points OpenClaw at the repository's skills/ (skills.load.extraDirs);
#   2. runs `openclaw skills check` and `openclaw skills info NAME` for every skill and
#      fails unless each one is found and eligible with the venv's `clawpoint` on PATH;
#   3. when `clawpoint serve` exists, adds it as a stdio MCP server (`openclaw mcp add`,
#      which probes before saving) serving the toolsets the skills declare
#      (`metadata.clawpoint-toolsets`, with the default ones), runs `openclaw mcp probe`
#      and fails unless every tool the server itself lists is listed by OpenClaw's probe
#      (the names are printed).
# Exits non-zero on any failure, with the reason on stderr.
#
# Needs Node >= 22 tools (scripts/install-node-tools.sh) and the project venv (.venv).
# Environment:
#   CLAWPOINT_NODE_BIN   folder with node and openclaw (default /opt/clawpoint-node/bin)
#   CLAWPOINT_VENV       the project's virtual environment (default REPO/.venv)
#   CHECK_OPENCLAW_DEV_STUB=1  development only: when the venv has no `clawpoint` command,
#                        put a placeholder on PATH so eligibility can be checked; the script
#                        then still exits 3, because a placeholder proves nothing.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_BIN=${CLAWPOINT_NODE_BIN:-/opt/clawpoint-node/bin}
VENV=${CLAWPOINT_VENV:-$REPO/.venv}
SKILLS_DIR=$REPO/skills

log() { printf 'check-openclaw: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[[ -x $NODE_BIN/openclaw && -x $NODE_BIN/node ]] \
  || fail "openclaw not found in $NODE_BIN; run scripts/install-node-tools.sh first"
[[ -x $VENV/bin/python ]] || fail "no Python venv at $VENV (set CLAWPOINT_VENV)"
PY=$VENV/bin/python

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export HOME=$WORK/home
mkdir -p "$HOME"

stub_used=0
CLAWPOINT_BIN=$VENV/bin
if [[ ! -x $VENV/bin/clawpoint ]]; then
  if [[ ${CHECK_OPENCLAW_DEV_STUB:-0} == 1 ]]; then
    log "WARNING: $VENV/bin/clawpoint missing; using a development placeholder (exit 3 at the end)"
    CLAWPOINT_BIN=$WORK/stub-bin
    mkdir -p "$CLAWPOINT_BIN"
    printf '#!/bin/sh\necho "placeholder for the clawpoint command" >&2\nexit 1\n' \
      >"$CLAWPOINT_BIN/clawpoint"
    chmod +x "$CLAWPOINT_BIN/clawpoint"
    stub_used=1
  else
    fail "$VENV/bin/clawpoint is missing: install the project into the venv (pip install -e .)"
  fi
fi
export PATH=$NODE_BIN:$CLAWPOINT_BIN:$PATH
# Run OpenClaw from the throwaway HOME so it cannot pick up a workspace from the repo.
cd "$HOME"

oc() { timeout 180 openclaw "$@"; }

log "openclaw $(oc --version 2>/dev/null | head -1), node $(node --version)"

# Skill names from the folders (each must hold a SKILL.md).
mapfile -t SKILLS < <(find "$SKILLS_DIR" -mindepth 2 -maxdepth 2 -name SKILL.md -printf '%h\n' \
  | xargs -n1 basename | sort)
(( ${#SKILLS[@]} )) || fail "no skills found under $SKILLS_DIR"

dirs_json=$("$PY" -c 'import json,sys; print(json.dumps([sys.argv[1]]))' "$SKILLS_DIR")
oc config set skills.load.extraDirs "$dirs_json" >/dev/null \
  || fail "openclaw config set skills.load.extraDirs failed"

oc skills check --json >"$WORK/check.json" 2>"$WORK/check.err" \
  || { cat "$WORK/check.err" >&2; fail "openclaw skills check failed"; }
"$PY" - "$WORK/check.json" "${SKILLS[@]}" <<'EOF' || fail "openclaw skills check: see above"
import json, sys
report = json.load(open(sys.argv[1]))
wanted = sys.argv[2:]
eligible = set(report.get("eligible", []))
missing = {m["name"]: m.get("missing", {}) for m in report.get("missingRequirements", [])}
bad = 0
for name in wanted:
    if name in eligible:
        print(f"check-openclaw: skills check: {name}: eligible", file=sys.stderr)
    else:
        why = missing.get(name, "not listed at all (not loaded?)")
        print(f"check-openclaw: skills check: {name}: NOT eligible: {why}", file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
EOF

for name in "${SKILLS[@]}"; do
  oc skills info "$name" --json >"$WORK/info-$name.json" 2>"$WORK/info.err" \
    || { cat "$WORK/info.err" >&2; fail "openclaw skills info $name failed"; }
  "$PY" - "$WORK/info-$name.json" "$name" "$SKILLS_DIR" <<'EOF' || fail "openclaw skills info $name"
import json, os, sys
info = json.load(open(sys.argv[1]))
name, skills_dir = sys.argv[2], sys.argv[3]
problems = []
if info.get("name") != name:
    problems.append(f"name is {info.get('name')!r}")
if not info.get("eligible"):
    problems.append(f"not eligible, missing {info.get('missing')}")
if os.path.realpath(info.get("baseDir", "")) != os.path.realpath(os.path.join(skills_dir, name)):
    problems.append(f"loaded from {info.get('baseDir')!r}, not from {skills_dir}")
if "clawpoint" not in info.get("requirements", {}).get("bins", []):
    problems.append("does not require the clawpoint bin")
if not info.get("emoji") or not info.get("homepage"):
    problems.append("emoji or homepage missing from metadata.openclaw")
for p in problems:
    print(f"check-openclaw: skills info {name}: {p}", file=sys.stderr)
if not problems:
    print(f"check-openclaw: skills info {name}: ok", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
done

mcp_checked=0
if [[ $stub_used == 0 ]] && "$VENV/bin/clawpoint" serve --help >/dev/null 2>&1; then
  # A Python server can take longer than OpenClaw's default 5 s to answer initialize on a
  # busy machine; allow a minute. Serve every toolset a skill declares it needs.
  TOOLSETS=$("$PY" - "$SKILLS_DIR" <<'EOF'
import pathlib, sys
import yaml
names = {"default"}
for skill in pathlib.Path(sys.argv[1]).glob("*/SKILL.md"):
    front = yaml.safe_load(skill.read_text(encoding="utf-8").split("---", 2)[1])
    declared = (front.get("metadata") or {}).get("clawpoint-toolsets")
    names |= {n.strip() for n in str(declared or "").split(",") if n.strip()}
print(",".join(sorted(names)))
EOF
  ) || fail "cannot read the toolsets the skills declare"
  log "mcp add: clawpoint serve --toolsets=$TOOLSETS"
  oc mcp add clawpoint --command "$VENV/bin/clawpoint" --arg serve --arg="--toolsets=$TOOLSETS" \
    --cwd "$REPO" --connect-timeout 60 \
    >"$WORK/add.out" 2>&1 || { cat "$WORK/add.out" >&2; fail "openclaw mcp add (with probe) failed"; }
  oc mcp probe clawpoint --json >"$WORK/probe.json" 2>"$WORK/probe.err" \
    || { cat "$WORK/probe.err" >&2; fail "openclaw mcp probe failed"; }
  # Expected names: the server's own tools/list (the same build the command serves).
  PYTHONPATH=$REPO CLAWPOINT_HOME=$WORK/state "$PY" - "$WORK/probe.json" "$TOOLSETS" <<'EOF' || fail "openclaw mcp probe: tools missing"
import json, sys
import anyio
from core.config import load_settings
from core.service.facade import bootstrap
from mcp_server.server import build_server, check_toolsets

async def served() -> set[str]:
    toolsets = check_toolsets(sys.argv[2].split(","))
    server = build_server(bootstrap(load_settings()), toolsets=toolsets)
    return {t.name for t in await server.list_tools()}

expected = anyio.run(served)
probe = json.load(open(sys.argv[1]))
listed = {t.split("__", 1)[1] for t in probe.get("tools", []) if t.startswith("clawpoint__")}
missing = sorted(expected - listed)
print(f"check-openclaw: mcp probe: {len(listed)} tools listed", file=sys.stderr)
print(f"check-openclaw: mcp probe: tools: {' '.join(sorted(listed))}", file=sys.stderr)
if missing:
    print(f"check-openclaw: mcp probe: missing tools: {', '.join(missing)}", file=sys.stderr)
sys.exit(1 if missing else 0)
EOF
  mcp_checked=1
else
  log "SKIP MCP: '$VENV/bin/clawpoint serve' is not available yet"
fi

if [[ $stub_used == 1 ]]; then
  log "skills are eligible only against a placeholder clawpoint: not a real pass (exit 3)"
  exit 3
fi
log "OK: ${#SKILLS[@]} skills eligible$([[ $mcp_checked == 1 ]] && echo '; MCP tools listed')"
