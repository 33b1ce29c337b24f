#!/usr/bin/env bash
# The GPU figures of the simulator in one prepared call (docs/results/simulator_backends.md, "On a GPU"):
#   1. the torch backend's steps/s and samples/s on the README example (tied softmax L = 2, B = 512, 4 seeds
#      batched), float64 and float32, at d = 400 and 800, on the CPU and the GPU of that machine;
#   2. the paper's Fig. 3 setting (untied h1, B = 4096, ε = 0.002, 4 seeds batched, float32) to τ = 0.3 at
#      d = 400 and 800: wall time, samples/s and the overlap curve (CSV and PNG).
# It runs from the repository root with the machine's own python3 (torch, NumPy, Numba, SymPy, SciPy): symattn is
# imported from the checkout, nothing is installed. One command, under 10 minutes (each step has its own time limit,
# so one that overruns leaves the others' files):
#   bash benchmarks/device_check.sh
# It writes 8 files under $OUT (default device_out): env.txt, backends.md, fig3_d400.txt, fig3_d800.txt and the two
# runs' simulation.csv and overlap.png.
# A CPU smoke test (a minute): DEVICE=cpu DIMS=64 FIG3_DIMS=64 OUT=device_smoke bash benchmarks/device_check.sh
set -uo pipefail
OUT=${OUT:-device_out}
DEVICE=${DEVICE:-cuda}
DIMS=${DIMS:-400 800}
FIG3_DIMS=${FIG3_DIMS:-400 800}
FIG3_TIME=${FIG3_TIME:-0.3}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SYMATTN_CACHE="${SYMATTN_CACHE:-/tmp/symattn_cache}"
{
    git log -1 --format='commit %H' 2>/dev/null || echo "commit: not a git checkout"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "no nvidia-smi"
    nproc
    $PY -c "import sys, torch, numpy, numba, sympy, scipy; print(sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__, 'numba', numba.__version__, 'sympy', sympy.__version__,
'scipy', scipy.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1. the torch simulator benchmark (CPU rows with all the machine's threads; GPU rows where torch sees one)
timeout 170 $PY benchmarks/bench_backends.py --no-numpy --dims $DIMS --steps 5 --seeds 4 --threads "$(nproc)" \
    > "$OUT/backends.md" 2>&1
echo "bench_backends: exit $?" >> "$OUT/backends.md"
tail -12 "$OUT/backends.md"

# 2. the paper's Fig. 3 setting on the device
for d in $FIG3_DIMS; do
    timeout 170 $PY benchmarks/paper_fig3_gpu.py --device "$DEVICE" --dim "$d" --time "$FIG3_TIME" \
        --out "$OUT/fig3_d$d" > "$OUT/fig3_d$d.txt" 2>&1
    echo "paper_fig3_gpu d = $d: exit $?" >> "$OUT/fig3_d$d.txt"
    head -3 "$OUT/fig3_d$d.txt"
done
