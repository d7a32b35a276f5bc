#!/usr/bin/env bash
# Run the test suite with the services it needs: the local Slurm cluster is brought up
# first (when this machine can run it) and taken down afterwards, whatever the outcome.
set -uo pipefail
cd "$(dirname "$0")/.."
started_slurm=0
if [[ -x scripts/slurm-cluster.sh && $(id -u) -eq 0 ]]; then
  if scripts/slurm-cluster.sh up; then started_slurm=1; else echo "slurm cluster could not start: its tests will skip" >&2; fi
fi
# Node >= 24 tools (OpenClaw, mcporter) for the agent-layer checks; their tests skip with the
# reason when the npm registry cannot be reached.
if command -v npm >/dev/null 2>&1; then
  scripts/install-node-tools.sh >/dev/null || echo "node tools could not be installed: OpenClaw checks will skip" >&2
fi
cleanup() { (( started_slurm )) && scripts/slurm-cluster.sh down >/dev/null 2>&1; }
trap cleanup EXIT
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
