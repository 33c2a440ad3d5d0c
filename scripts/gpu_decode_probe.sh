#!/usr/bin/env bash
# Build the split decode's standalone probe (pagecheck/gpu/probes/decode_split_probe.cu) with nvcc for sm_90a,
# once per block size (4 and 8 warps), and run it at the decode benchmark's shapes over a range of split
# counts; each line is one plan's verdict against the float64 reference, its repeatability and its times.
# Needs nvcc and a device of compute capability 9.0, nothing else: no MLX, no extension build.
#
#   bash scripts/gpu_decode_probe.sh [OUTDIR] [VARIANT]
#
# VARIANT keeps the ring variants whose name contains it (s3_sw1, s2_sw1, ...). Writes OUTDIR/probe.log.
set -uo pipefail
out=${1:-/tmp/decode_probe}
only=${2:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
status=0
for warps in 4 8; do
  "$nvcc" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I ext/kernels \
    -DPAGECHECK_DECODE_WARPS=$warps pagecheck/gpu/probes/decode_split_probe.cu -o "$out/decode_split_probe_w$warps" \
    || exit 1
done
# B H_Q H_KV CONTEXT PAGE SPLITS REPS: B 1 long and short (the goal's shape first), then two batched shapes.
for shape in "1 32 8 16384 128 8,12,16,20,24,32" "1 32 8 4096 128 4,8,12,16" "16 32 8 16384 128 1,2,3" \
             "64 32 8 4096 128 1,2" "3 32 8 1000 5 1,3,7"; do
  for warps in 4 8; do
    # shellcheck disable=SC2086
    timeout 120 "$out/decode_split_probe_w$warps" $shape 50 $only 2>&1 | tee -a "$out/probe.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== warps $warps shape $shape: exit $rc" | tee -a "$out/probe.log"; status=2; }
  done
done
exit $status
