#!/usr/bin/env bash
# Issue 21's GPU run in one call: build, then the per-call wall table (with each call on distinct K/V beside it),
# the kernel table and the serving table; then where a decode step's and a
# 128-token prefill chunk's host time goes (serving_profile: build, submit,
# wait, and the graph's nodes by kind; decode steps alone and each overlapped
# with the previous one, as serve-bench runs them, and overlapped with 2 of the 8
# slots active, as most of serve-bench's steps are); last the goals, judged
# from the three tables.
# Run on a CUDA machine with MLX's CUDA back-end importable (the staged
# wheels installed; /work/shared/device/README.md):
#
#   bash scripts/gpu_end_to_end.sh OUTDIR
#
# Writes OUTDIR/percall.{json,md}, bench_gpu.json (+ .log), serve/serve_bench.{json,md},
# profile.log, profile_overlap.log, profile_partial.log, prefill_profile.log, end_to_end.{json,md}. Each step runs under a time limit
# (PERCALL_LIMIT, KERNEL_LIMIT, SERVE_LIMIT, PROFILE_LIMIT seconds) and prints
# its exit status. VERIFY=LOGDIR (a gpu_verify.sh run of the same build, an
# earlier device call: both do not fit one) adds its verdicts to the goals;
# for steps run in calls of their own, end_to_end_goals takes --verify again. ARCHIVE=FILE.tgz packs
# OUTDIR into one file at the end, for a device call that returns only a few files (OUTDIR outside $OUT,
# ARCHIVE inside it).
set -uo pipefail
out=${1:?usage: gpu_end_to_end.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the steps run from elsewhere
if [ -n "${VERIFY:-}" ]; then VERIFY=$(cd "$VERIFY" && pwd) || exit 2; fi
if [ -n "${ARCHIVE:-}" ]; then ARCHIVE=$(cd "$(dirname "$ARCHIVE")" && pwd)/$(basename "$ARCHIVE") || exit 2; fi
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
start=$SECONDS

step() {
  local name=$1 limit=$2
  shift 2
  local begun=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - begun)) s (at $((SECONDS - start)) s)"
  warn_prefill_fallback "$name" "$out/$name.log"  # scripts/gpu_checkout.sh
}

. scripts/gpu_checkout.sh  # the GPU's name; the checkout installed into $PROJ, which is now the directory
step percall "${PERCALL_LIMIT:-200}" python3 -m pagecheck.gpu.percall --distinct-kv --json "$out/percall.json" \
  --markdown "$out/percall.md"
cat "$out/percall.md"
step kernels "${KERNEL_LIMIT:-300}" python3 -m pagecheck.gpu.bench --quick --json "$out/bench_gpu.json"
sed -n '/^summary/,$p' "$out/kernels.log"
# Two rounds (the second in reversed variant order): each variant's row is its slower round, and both are listed.
step serve "${SERVE_LIMIT:-480}" python3 -m pagecheck.commands.serve_bench --device gpu --model qwen3-0.6b --requests 16 \
  --batch 8 --prompt-lens 1024,4096 --rounds 2 --out "$out/serve"
grep -A6 '^| variant' "$out/serve.log"
grep 'each round' "$out/serve.log"
grep -E 'decode steps [0-9]+ alone' "$out/serve.log"  # each variant's steps alone and beside a prefill chunk
step profile "${PROFILE_LIMIT:-150}" python3 -m pagecheck.bench.serving_profile --batch 8 --context 2048 --steps 20
grep -E '^(decode step|graph of)' "$out/profile.log"
step profile_overlap "${PROFILE_LIMIT:-150}" python3 -m pagecheck.bench.serving_profile --batch 8 --context 2048 --steps 20 \
  --overlap
grep -E '^decode step' "$out/profile_overlap.log"
step profile_partial "${PROFILE_LIMIT:-150}" python3 -m pagecheck.bench.serving_profile --batch 8 --active 2 --context 2048 \
  --steps 20 --overlap
grep -E '^(decode step|graph of)' "$out/profile_partial.log"
step prefill_profile "${PROFILE_LIMIT:-150}" python3 -m pagecheck.bench.serving_profile --phase prefill --context 2048 --steps 20
grep -E '^(prefill chunk|graph of)' "$out/prefill_profile.log"
python3 -m pagecheck.gpu.end_to_end_goals "$out" ${VERIFY:+--verify "$VERIFY"}
archive_logs "$out"  # scripts/gpu_checkout.sh
