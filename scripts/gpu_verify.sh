#!/usr/bin/env bash
# On a CUDA machine with MLX's CUDA back-end importable: install the checkout
# (building the extension) into $PROJ, then run the
# named GPU steps, each under a time limit, with logs in LOGDIR.
#
#   bash scripts/gpu_verify.sh LOGDIR STEP...
#
# Steps:
#   tests       the test files that run the ops and the model (GPU_TESTS
#               below), one process per file so a crash names its file; the
#               default device is the GPU, so the GPU tests run and the op
#               tests go through eval_gpu. The rest of the suite is CI's: it
#               needs the checkout (pyproject, docs), the test extras, or
#               child processes that import the installed package, which
#               the PYTHONPATH install here does not give them. TESTS names
#               other files, PYTEST_ARGS adds options. FILE_LIMIT seconds per
#               file, 240 by default (on a fresh machine the op tests
#               JIT-compile every kernel variant they run: 120 s was too
#               little for test_ext_paged_attention.py, and
#               test_gpu_attention.py, 61 s alone, also runs three child
#               processes that compile their own variants); TESTS_LIMIT for the
#               step, 480 by default, so `tests` needs a device call of its own
#   invariants  the invariants suite with --pagecheck-device gpu
#   tolerance   the tolerance sweep with --device gpu, reports in LOGDIR/tolerance
#   harness     every kernel schedule against the float64 reference
#               (HARNESS_LIMIT seconds, 420 by default: in 300 s the v19
#               run passed its 420 case checks but not the big-pool ones)
#   bench       the GPU benchmark (BENCH_ARGS adds options)
#   profile     each kernel's GPU time per chained call (PROFILE_ARGS adds
#               options)
# Each step prints its exit status and the tail of its log. ARCHIVE=FILE.tgz packs LOGDIR into one file at the
# end, for a device call that returns only a few files (the tolerance sweep alone writes more than that).
set -uo pipefail
out=${1:?usage: gpu_verify.sh LOGDIR STEP...}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the steps run from elsewhere
if [ -n "${ARCHIVE:-}" ]; then ARCHIVE=$(cd "$(dirname "$ARCHIVE")" && pwd)/$(basename "$ARCHIVE") || exit 2; fi
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  tail -n "${TAIL:-12}" "$out/$name.log"
  warn_prefill_fallback "$name" "$out/$name.log"  # scripts/gpu_checkout.sh
}

GPU_TESTS="tests/test_gpu_attention.py tests/test_gpu_device_choice.py tests/test_gpu_launcher.py tests/test_gpu_plan_agreement.py
  tests/test_gpu_percall.py tests/test_gpu_profile.py tests/test_gpu_program.py tests/test_gpu_stream_probe.py
  tests/test_ext_*.py tests/test_impl_*.py tests/test_validated_inputs.py
  tests/test_quantized_embedding.py tests/test_qk_norm_rope.py tests/test_node_cost.py tests/test_qwen3_model.py tests/test_serving_*.py
  tests/test_paged_step.py tests/test_serve_bench.py"
export GPU_TESTS
. scripts/gpu_checkout.sh  # the GPU's name; the checkout installed into $PROJ, which is now the directory
for name in "$@"; do
  case $name in
    # The step fails where any file does; its last lines name each file with its exit status and pytest's
    # summary, so the tail printed after the step covers every file. "$1" holds the current file's output.
    tests) TAIL=${TAIL:-40} step tests ${TESTS_LIMIT:-480} bash -c 'failed=0; summary=()
             for f in ${TESTS:-$GPU_TESTS}; do
               echo "## $f"; timeout ${FILE_LIMIT:-240} python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} "$f" 2>&1 | tail -n 40 > "$1"
               rc=${PIPESTATUS[0]}; cat "$1"
               echo "## $f exit $rc"; summary+=("$f: exit $rc, $(tail -n 1 "$1")"); [ "$rc" -eq 0 ] || failed=1
             done
             echo "## summary"; printf "%s\n" "${summary[@]}"; exit $failed' _ "$out/tests.file.log" ;;
    invariants) step invariants 200 python3 -m pytest -q -n 8 --pyargs pagecheck.invariants --pagecheck-device gpu --pagecheck-subject impl ;;
    tolerance) step tolerance 300 python3 -m pagecheck.cli tolerance --device gpu --out "$out/tolerance" ;;
    harness) step harness ${HARNESS_LIMIT:-420} python3 -m pagecheck.gpu.harness --json "$out/harness.json" ;;
    bench) TAIL=45 step bench 500 python3 -m pagecheck.gpu.bench --json "$out/bench.json" ${BENCH_ARGS:-} ;;
    profile) TAIL=${TAIL:-200} step profile 400 python3 -m pagecheck.gpu.profile --json "$out/profile.json" ${PROFILE_ARGS:-} ;;
    *) echo "unknown step $name" ;;
  esac
done
archive_logs "$out"  # scripts/gpu_checkout.sh
