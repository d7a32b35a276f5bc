#!/usr/bin/env bash
# Run the test suite with the services it needs: the local Slurm cluster is brought up
# first (when this machine can run it) and taken down afterwards, whatever the outcome, unless
# it was already up (`make slurm-up`): then it is left running.
set -uo pipefail
cd "$(dirname "$0")/.."
# The suite starts clawpoint thousands of times (CLI, wrappers, MCP servers). Where the
# environment forbids writing byte code (PYTHONDONTWRITEBYTECODE, set by some CI images),
# each of those starts would compile core from source again: compile it once here.
.venv/bin/python -m compileall -q core mcp_server >/dev/null || true
# Likewise pytest's rewritten test modules: each worker rewrites the asserts of every test
# module it collects unless a rewritten copy is cached in __pycache__, which it writes only
# where byte code may be written. One collection that may write them first: each worker's
# collection then takes 3 s of CPU instead of 9 (2,200 tests, 2026-12-04). It runs while
# the cluster and the Node tools are checked (below).
PYTHONDONTWRITEBYTECODE='' .venv/bin/python -m pytest -q -p no:cacheprovider --collect-only "$@" \
  >/dev/null 2>&1 &
precollect=$!
started_slurm=0
if [[ -x scripts/slurm-cluster.sh && $(id -u) -eq 0 ]]; then
  scripts/slurm-cluster.sh status >/dev/null 2>&1; was_up=$(( $? == 0 ))
  # A cluster this run starts begins with no job of an earlier run (one killed before its end).
  if scripts/slurm-cluster.sh up; then (( was_up )) || { started_slurm=1; scripts/slurm-cluster.sh clear-jobs; }
  else echo "slurm cluster could not start: its tests will skip" >&2; fi
fi
# Node >= 24 tools (OpenClaw, mcporter) for the agent-layer checks; their tests skip with the
# reason when the npm registry cannot be reached.
if command -v npm >/dev/null 2>&1; then
  scripts/install-node-tools.sh >/dev/null || echo "node tools could not be installed: OpenClaw checks will skip" >&2
fi
cleanup() { (( started_slurm )) && scripts/slurm-cluster.sh down >/dev/null 2>&1; }
trap cleanup EXIT
# Most tests wait (on CRIU, the wrappers, the Slurm daemons, the OpenClaw gateway) rather than
# compute, so they run in parallel on more workers than there are CPUs: three per CPU,
# between 2 and 12. On 2 CPUs (2026-12-04, the same commit, back to back): four workers left
# the CPUs idle a fifth of the run (312 s of 1,624 CPU-s) and took 806 s of pytest; six kept
# them 95% busy and took 718 s, with no more failures. Tests that
# share something (the Slurm cluster, a module-scoped fixture) stay on one worker: see
# tests/conftest.py. PYTEST_WORKERS sets the count; arguments come last, so
# `scripts/run-tests.sh -n 0` runs serially and `scripts/run-tests.sh tests/cli -k name` one test.
cpus=$(nproc 2>/dev/null || echo 2)
workers=${PYTEST_WORKERS:-$(( cpus * 3 < 2 ? 2 : (cpus * 3 > 12 ? 12 : cpus * 3) ))}
# TYPECHECK=1 (what `make test` sets): mypy runs beside the suite and fails the run as well.
mypy_pid=""
if [[ ${TYPECHECK:-0} == 1 ]]; then
  mypy_out=$(mktemp)
  .venv/bin/mypy >"$mypy_out" 2>&1 &
  mypy_pid=$!
fi
wait "$precollect"
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup --durations=20 -rs "$@"
rc=$?
if [[ -n $mypy_pid ]]; then
  wait "$mypy_pid"; mypy_rc=$?
  echo "--- mypy (run beside the tests) ---"
  cat "$mypy_out"; rm -f "$mypy_out"
  (( rc == 0 && mypy_rc != 0 )) && rc=$mypy_rc
fi
exit $rc
