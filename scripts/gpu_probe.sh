#!/usr/bin/env bash
# Build one of the kernels' standalone probes with nvcc for sm_90a and run it at the benchmark's shapes, then
# at small mixed layouts; each line is one variant's verdict against the float64 reference, its repeatability
# and its time. Needs nvcc (the CUDA toolkit) and a device of compute capability 9.0, nothing else: no MLX,
# no extension build.
#
#   bash scripts/gpu_probe.sh prefill|decode [OUTDIR] [VARIANT]
#
# prefill: the warpgroup prefill (pagecheck/gpu/probes/prefill_wgmma_probe.cu), at the prefill benchmark's two
#          shapes, the same at pages of 16, then layouts whose tiles cross pages or end mid-tile.
# decode:  the split decode (pagecheck/gpu/probes/decode_split_probe.cu), built for blocks of 4 and of 8 warps,
#          at B 1 long and short over a range of split counts, three batched shapes, pages of 5; split count 0
#          is the single-pass decode.
# VARIANT keeps the variants whose name contains it (prefill: wg2_kt128_s3, wg3_kt64_s3, ...; decode:
# s3_swtrue, s2_swtrue, ...). KERNELS=DIR compiles against another copy of ext/kernels (an earlier build's, from
# `git archive REV ext/kernels`), for an A/B in one machine start. PAGECHECK_PROBE_SPARE_PAGES=N passes through to the
# decode probe (table columns past the longest context, 1 by default). Writes OUTDIR/probe.log.
set -uo pipefail
kind=${1:-}
case $kind in
  prefill) builds=(""); shapes=("1 32 8 512 4096 128 50 32" "4 32 8 2048 8192 128 10 32" "1 32 8 512 4096 16 20 32"
             "4 32 8 2048 8192 16 5 16" "3 32 8 300 1000 5 3 48" "3 32 8 333 2000 16 3 48" "3 32 8 77 203 128 3 48") ;;
  # B H_Q H_KV CONTEXT PAGE SPLITS REPS (splits 0: the single-pass kernel); a build per block size.
  decode) builds=(4 8); shapes=("1 32 8 16384 128 8,12,16,20,24,32 50" "1 32 8 4096 128 4,8,12,16 50"
            "16 32 8 1024 128 0,1,2 50" "16 32 8 16384 128 0,1,2,3 10" "64 32 8 4096 128 0,1,2 10"
            "3 32 8 1000 5 0,1,3,7 10") ;;
  *) echo "usage: gpu_probe.sh prefill|decode [OUTDIR] [VARIANT]" >&2; exit 1 ;;
esac
out=${2:-/tmp/${kind}_probe}
only=${3:-}
mkdir -p "$out"
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
kernels=${KERNELS:-ext/kernels}
[ -f "$kernels/paged_common.cuh" ] || { echo "gpu_probe.sh: KERNELS=$kernels holds no paged_common.cuh" >&2; exit 2; }
declare -A source_of=([prefill]=pagecheck/gpu/probes/prefill_wgmma_probe.cu [decode]=pagecheck/gpu/probes/decode_split_probe.cu)
for warps in "${builds[@]}"; do
  "$nvcc" -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I "$kernels" ${warps:+-DPAGECHECK_DECODE_WARPS=$warps} \
    "${source_of[$kind]}" -o "$out/${kind}_probe$warps" || exit 1
done
status=0
for shape in "${shapes[@]}"; do
  for warps in "${builds[@]}"; do
    # shellcheck disable=SC2086
    timeout 120 "$out/${kind}_probe$warps" $shape $only 2>&1 | tee -a "$out/probe.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== ${warps:+warps $warps }shape $shape: exit $rc" | tee -a "$out/probe.log"; status=2; }
  done
done
exit $status
