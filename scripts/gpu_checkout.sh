# Sourced by scripts/gpu_verify.sh and scripts/gpu_end_to_end.sh, from the checkout root, once they have
# defined `step`: prints the GPU, installs the checkout into $PROJ and continues from there, and says whether
# the op's kernel header goes to MLX as a file.
# The layers are pagecheck.<folder> only once installed (pyproject's package-dir), so the checkout is
# installed into $PROJ (fresh each run) and the commands run from outside it, with the tests copied beside.
# Called by both scripts' `step` on each step's log: a warning where the op printed its one line saying the
# warpgroup prefill did not compile (ext/src/common/gpu_dispatch.cpp; pagecheck.gpu.end_to_end_goals looks for
# the same words): from then on that process ran the fallback prefill.
warn_prefill_fallback() {
  if grep -q "the warpgroup prefill kernel did not compile" "$2"; then
    echo "== $1: WARNING: the warpgroup prefill did not compile; this step ran the fallback prefill"
  fi
}
# Called by both scripts last: packs the log folder $1 into ARCHIVE (made absolute before the scripts' cd), where
# ARCHIVE is set.
archive_logs() {
  [ -n "${ARCHIVE:-}" ] || return 0
  tar czf "$ARCHIVE" -C "$(dirname "$1")" "$(basename "$1")" && echo "== archived $1 in $ARCHIVE"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
PROJ=${PROJ:-/tmp/pagecheck-proj}
rm -rf "$PROJ" && mkdir -p "$PROJ"
step build 300 python3 -m pip install --no-build-isolation --no-deps --target "$PROJ/site" .
cp -r tests "$PROJ/tests"
export PYTHONPATH="$PROJ/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$PROJ"
# Whether the attention kernels' header reaches MLX as an include file (ext/src/common/kernel_header_file.h).
python3 -c "from pagecheck import ext; print('NVRTC reads the kernels header file:', ext.nvrtc_reads_header_files())"
