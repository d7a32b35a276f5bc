#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU (driver >= 550; PyTorch with CUDA and
# nvidia-ml-py installed; no package registry needed). Under 5 minutes: probes the driver,
# NVML and the checkpoint API; measures host<->device copy bandwidth; suspends and resumes a
# process holding GPU_CHECK_GIB (default 8) GiB of GPU state with a checksum, showing NVML's
# memory freed and restored, with timings; checks that a managed-memory process is refused
# fast; where criu and CRIU's CUDA plugin are present (GPU_CHECK_CRIU=path/to/criu,
# CLAWPOINT_CRIU_PLUGIN_DIRS=dir of cuda_plugin.so), dumps and restores a GPU process and
# verifies it. The logic is scripts/gpu_check.py; this wrapper bounds it and keeps its output.
#
# Usage: scripts/gpu-check.sh            (results: stdout, and $OUT/gpu-check.json if OUT is set)
# Not yet run on hardware by this project.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
python=${PYTHON:-python3}
budget=${GPU_CHECK_BUDGET_S:-280}

if ! command -v "$python" >/dev/null 2>&1; then
    echo "gpu-check: $python not found (set PYTHON)" >&2
    exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: nvidia-smi not found: is the NVIDIA driver installed?" >&2
fi

out=${OUT:-}
log=$(mktemp -t gpu-check.XXXXXX.log)
echo "gpu-check: $(date -u +%FT%TZ) on $(uname -n), kernel $(uname -r), budget ${budget}s"
nvidia-smi 2>/dev/null | head -15 || true

cd "$root" || exit 2
# -k: a phase stuck in the driver gets SIGKILL 10 s after the budget's SIGTERM.
timeout -k 10 "$budget" "$python" "$here/gpu_check.py" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "gpu-check: stopped at the ${budget}s budget (exit $rc); partial output above" >&2
fi
if [ -n "$out" ] && [ -d "$out" ]; then
    cp "$log" "$out/gpu-check.log"
fi
rm -f "$log"
exit "$rc"
