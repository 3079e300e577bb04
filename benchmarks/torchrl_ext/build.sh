#!/usr/bin/env bash
# Build torchrl 0.14.1's C++ extension (torchrl._torchrl) CPU-only against the torch of the python in $PY (default: the hatch bench env's), for the
# replay benchmark only (benchmarks/bench_replay.py). TorchRL's wheel ships a _torchrl .so compiled against an older
# torch; on torch 2.13 it fails to load (undefined symbol torch::autograd::_wrap_outputs), so torchrl's
# PrioritizedSampler raises. The sources are torchrl's own csrc/ (shipped in the wheel under torchrl/csrc):
# segment_tree.h, pybind.cpp, utils.h, utils.cpp, torch_utils.h, numpy_utils.h; CUDA files are not used
# (WITH_CUDA undefined). Compiler: the system g++; pybind11 headers come with torch.
set -euo pipefail
PY=${PY:-$(cd "$(dirname "$0")/../.." && hatch env find bench)/bin/python}
HERE=$(mktemp -d)  # build outside the repository: TorchRL's sources are copied there, never here
cp "$(cd "$(dirname "$0")" && pwd)/setup.py" "$HERE/"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
SRC="$SITE/torchrl/csrc"
cd "$HERE"
for f in segment_tree.h pybind.cpp utils.h utils.cpp torch_utils.h numpy_utils.h; do
  [ -f "$f" ] || cp "$SRC/$f" .
done
rm -rf build _torchrl*.so
MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py build_ext --inplace -q
SO=$(ls "$HERE"/_torchrl*.so | head -1)
DEST="$SITE/torchrl/$(basename "$SO")"
if [ -f "$DEST" ] && [ ! -f "$DEST.orig" ]; then mv "$DEST" "$DEST.orig"; fi  # keep the wheel's broken .so
cp "$SO" "$DEST.tmp" && mv -f "$DEST.tmp" "$DEST"  # atomic: a running process keeps the old file
"$PY" - <<'PYEOF'
import torch
from torchrl._torchrl import SumSegmentTreeFp32, MinSegmentTreeFp32
from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer
rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.9, storage=LazyTensorStorage(100))
rb.extend(torch.arange(100.0))
s, info = rb.sample(8, return_info=True)
rb.update_priority(info["index"], torch.rand(8))
print("torchrl._torchrl OK:", SumSegmentTreeFp32.__module__, "sampled", s.tolist())
PYEOF
