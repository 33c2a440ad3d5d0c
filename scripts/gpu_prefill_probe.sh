#!/usr/bin/env bash
# Build the warpgroup prefill's standalone probe (pagecheck/gpu/probes/prefill_wgmma_probe.cu) with nvcc for
# sm_90a and run it at the prefill benchmark's shapes, then at pages of 16 and at small mixed layouts; each
# line is one variant's verdict against the float64 reference, its repeatability and its time. Needs nvcc (the
# CUDA toolkit) and a device of compute capability 9.0, nothing else: no MLX, no extension build.
#
#   bash scripts/gpu_prefill_probe.sh [OUTDIR] [VARIANT]
#
# VARIANT keeps the variants whose name contains it (wg2_kt128_s3, wg3_kt64_s3, ...). Writes OUTDIR/probe.log.
set -uo pipefail
out=${1:-/tmp/prefill_probe}
only=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I ext/kernels \
  pagecheck/gpu/probes/prefill_wgmma_probe.cu -o "$out/prefill_wgmma_probe" || exit 1
status=0
# B H_Q H_KV L CONTEXT PAGE REPS SAMPLES: the benchmark's two shapes, then pages of 16, then small layouts
# whose tiles cross pages (pages of 5 and 16) or end mid-tile, with a context-0 request.
for shape in "1 32 8 512 4096 128 50 32" "4 32 8 2048 8192 128 10 32" "1 32 8 512 4096 16 20 32" \
             "4 32 8 2048 8192 16 5 16" "3 32 8 300 1000 5 3 48" "3 32 8 333 2000 16 3 48" "3 32 8 77 203 128 3 48"; do
  # shellcheck disable=SC2086
  timeout 120 "$out/prefill_wgmma_probe" $shape $only 2>&1 | tee -a "$out/probe.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "== shape $shape: exit $rc" | tee -a "$out/probe.log"; status=2; }
done
exit $status
