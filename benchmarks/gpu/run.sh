#!/usr/bin/env bash
# The project's one GPU check (issue 18), for a machine with a CUDA device, torch, triton, pytest and hypothesis:
#   1. every `gpu`-marked test of every package (tdict CUDA and CudaGraphModule, rl-collect CUDA weight sync,
#      rl-replay CUDA storage, ...), then the whole rl-kernels suite on the device (real Triton compiles);
#   2. each rl-kernels op against its torch reference on the device, timed with CUDA events against the best
#      torch path (benchmarks/gpu/run_all.py), written to OUTDIR/gpu_kernels_<device>.{md,json}.
# Each phase has a time limit, so the whole run ends within 8 minutes; a failing phase does not stop the next.
#
#   bash benchmarks/gpu/run.sh [OUTDIR]            # GPU run (OUTDIR defaults to benchmarks/results)
#   bash benchmarks/gpu/run.sh --dry-run [OUTDIR]  # CPU: collects the GPU tests, runs the benchmarks on tiny
#                                                  # shapes under Triton's interpreter (tested in CI)
# PYTHON selects the interpreter (default python3). Exit status: 0 when every phase passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
OUTDIR="${1:-benchmarks/results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUTDIR"
PYTHONPATH="$(printf '%s:' "$PWD"/packages/*/src)${PYTHONPATH:-}"
export PYTHONPATH PYTHONUNBUFFERED=1 PYTHONHASHSEED=0

# the test files holding gpu-marked tests (rl-kernels' own suite runs whole, below)
mapfile -t GPU_FILES < <(grep -rlE "pytest\.mark\.gpu|mark\.gpu\b" tests --include='test_*.py' | grep -v '^tests/rl_kernels/' | sort)
status=0

if [[ $DRY == 1 ]]; then
  export TRITON_INTERPRET=1
  "$PY" -m pytest -q -p no:cacheprovider --collect-only -m gpu "${GPU_FILES[@]}" tests/rl_kernels || status=1
  "$PY" benchmarks/gpu/run_all.py --dry-run --out "$OUTDIR" || status=1
  exit $status
fi

"$PY" - <<'PY'
import torch, triton
print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| triton", triton.__version__, flush=True)
PY
echo "== 1a. gpu-marked tests: ${GPU_FILES[*]}"
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -m gpu \
  "${GPU_FILES[@]}" 2>&1 | tee "$OUTDIR/gpu_tests.log" || status=1
echo "== 1b. rl-kernels tests on the device"
timeout 150 "$PY" -m pytest -q -p no:cacheprovider \
  tests/rl_kernels 2>&1 | tee "$OUTDIR/gpu_kernel_tests.log" || status=1
echo "== 2. kernels against their references, timed"
timeout 210 "$PY" benchmarks/gpu/run_all.py --out "$OUTDIR" 2>&1 | tee "$OUTDIR/gpu_bench.log" || status=1
exit $status
