#!/usr/bin/env bash
# Two builds compared in one machine start: host figures (graph build, MLX's submit) move by up to 50%
# between starts of the H200 machine (ext/kernels/NOTES.md v16, v22), so a change to a decode step's host
# cost is judged only against the build before it, run beside it.
#
#   bash scripts/gpu_ab.sh OUTDIR OTHER_TREE [ROUNDS]
#   bash scripts/gpu_ab.sh OUTDIR --env NAME=VALUE [ROUNDS]
#
# With --env both are this checkout, built once: A runs as the environment has it, B with NAME=VALUE set
# (an experiment's switch, such as PAGECHECK_REUSE_KERNEL_NODES=1). Otherwise B is this checkout. A is OTHER_TREE laid over a copy of this checkout (so files that .gitignore keeps out
# of a carried folder, like reports/render, come from here); make it with
#   mkdir abtree && git archive REV | tar -x -C abtree
# and leave it untracked in the checkout so the device call carries it (and delete it before committing). Run with MLX's CUDA back-end
# importable (the staged wheels installed: PYTHONPATH holds them). Both builds are installed with pip
# --target (a tree of Python layers alone, with no ext/, setup.py or pyproject.toml, shares B's build); then ROUNDS rounds (default 3), each running A then B, or B then A on even rounds, of:
#   serving_profile --batch 8 --context 2048 --steps 30   (build, submit and wait of a decode step)
#   serve-bench, paged alone, one round                    (step median, decode tok/s)
# and last the medians over the rounds per build. MODEL, DEVICE, REQUESTS, BATCH, PROMPT_LENS, OUTPUT_LENS,
# PROFILE_ARGS override the defaults (qwen3-0.6b, gpu, 16, 8, 1024,4096, the trace's own; DEVICE=cpu with
# MODEL=qwen3-tiny runs the script's logic on a CPU). Logs and serve-bench outputs go under OUTDIR.
set -uo pipefail
usage="usage: gpu_ab.sh OUTDIR OTHER_TREE [ROUNDS] | gpu_ab.sh OUTDIR --env NAME=VALUE [ROUNDS]"
out=${1:?$usage}
other=${2:?$usage}
b_env=()  # the environment setting B runs with (--env), else none
if [ "$other" = --env ]; then
  setting=${3:?$usage}
  if [[ ! $setting =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]]; then
    echo "gpu_ab.sh: --env takes NAME=VALUE, got '$setting'" >&2
    exit 2
  fi
  b_env=("$setting")
  rounds=${4:-3}
else
  rounds=${3:-3}
fi
if [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_ab.sh: ROUNDS must be a positive integer, got '$rounds'" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ ${#b_env[@]} -eq 0 ] && { other=$(cd "$other" && pwd) || exit 2; }
cd "$(dirname "$0")/.."
here=$(pwd)
export PYTHONUNBUFFERED=1
model=${MODEL:-qwen3-0.6b}
device=${DEVICE:-gpu}
work=$(mktemp -d "${TMPDIR:-/tmp}/pagecheck-ab.XXXXXX")
if [ ${#b_env[@]} -eq 0 ]; then
  echo "a: $other laid over this checkout; b: this checkout; $rounds rounds, $model on $device"
  if [ ! -e "$other/ext" ] && [ ! -e "$other/setup.py" ] && [ ! -e "$other/pyproject.toml" ]; then
    # A tree of Python layers only changes no compiled code: A shares B's build, with OTHER_TREE's folders
    # laid over the installed packages after it (pyproject's package-dir: FOLDER is pagecheck.FOLDER,
    # pagecheck/ is pagecheck), so the extension is built once.
    builds="b"
    share_layers=1
    # Each folder must be a layer B installs, checked before B's build: pagecheck/ itself, a folder pyproject maps
    # to pagecheck.FOLDER, or a package inside pagecheck/.
    for folder in "$other"/*/; do
      name=$(basename "$folder")
      if [ "$name" != pagecheck ] && [ ! -d "$here/pagecheck/$name" ] \
          && ! grep -q "^\"pagecheck\.$name\" = " "$here/pyproject.toml"; then
        echo "gpu_ab.sh: $other/$name is not a layer this checkout installs; give a tree of layers" >&2
        exit 2
      fi
    done
  else
    # The two trees: B is this checkout; A is a copy of it with OTHER_TREE laid over it. Build outputs stay out.
    mkdir -p "$work/a/tree"
    tar -C "$here" --exclude=./build --exclude='./*.egg-info' --exclude=./.venv --exclude=./.devwhl \
      --exclude="./${other#"$here"/}" -cf - . | tar -C "$work/a/tree" -xf -
    cp -r "$other"/. "$work/a/tree/"
    rm -rf "$work/a/tree/build" "$work/a/tree"/*.egg-info
    builds="a b"
  fi
else
  echo "a: this checkout; b: this checkout with ${b_env[0]}; $rounds rounds, $model on $device"
  builds="b"  # one build, which A runs too
fi
for build in $builds; do
  tree=$([ "$build" = a ] && echo "$work/a/tree" || echo "$here")
  begun=$SECONDS
  python3 -m pip install --no-build-isolation --no-deps --target "$work/$build/site" "$tree" \
    > "$out/build_$build.log" 2>&1
  rc=$?
  echo "== build $build: exit $rc after $((SECONDS - begun)) s"
  [ "$rc" -eq 0 ] || { tail -n 20 "$out/build_$build.log"; exit 1; }
done
if [ -n "${share_layers:-}" ]; then
  mkdir -p "$work/a" && cp -r "$work/b/site" "$work/a/site"
  for folder in "$other"/*/; do
    name=$(basename "$folder")
    target="$work/a/site/pagecheck/$name"
    [ "$name" = pagecheck ] && target="$work/a/site/pagecheck"
    if [ "$name" != pagecheck ] && [ ! -d "$target" ]; then  # checked before the build; the install agrees
      echo "gpu_ab.sh: $other/$name is not an installed layer (no $target)" >&2
      exit 2
    fi
    # A layer is replaced whole, so a module B added is not left beside A's; pagecheck/ holds the other
    # layers' installed folders, so its files are laid over.
    [ "$name" != pagecheck ] && rm -rf "$target" && mkdir -p "$target"
    cp -r "$folder". "$target/"
    find "$target" -name __pycache__ -prune -exec rm -rf {} +
  done
  echo "== build a: B's build with $other's layers laid over it"
fi

profile_flags=(--model "$model" --batch "${BATCH:-8}" --context 2048 --steps 30)
[ "$device" = cpu ] && profile_flags+=(--cpu)
serve_flags=(--device "$device" --model "$model" --requests "${REQUESTS:-16}" --batch "${BATCH:-8}" --rounds 1
             --variants paged --prompt-lens "${PROMPT_LENS:-1024,4096}")
[ -n "${OUTPUT_LENS:-}" ] && serve_flags+=(--output-lens "$OUTPUT_LENS")
cd "$work"  # outside the checkout: each run imports the build its PYTHONPATH names
for round in $(seq 1 "$rounds"); do
  order="a b"
  [ $((round % 2)) -eq 0 ] && order="b a"
  for build in $order; do
    # --env: one install serves both; B adds its setting to the environment.
    installed=$([ ${#b_env[@]} -eq 0 ] && echo "$build" || echo b)
    run=(env PYTHONPATH="$work/$installed/site${PYTHONPATH:+:$PYTHONPATH}")
    [ "$build" = b ] && run+=("${b_env[@]}")
    echo "## round $round, build $build"
    # shellcheck disable=SC2086
    "${run[@]}" timeout 300 python3 -m pagecheck.bench.serving_profile "${profile_flags[@]}" ${PROFILE_ARGS:-} \
      > "$out/profile_${build}_$round.log" 2>&1
    grep -E '^(decode step|graph of)' "$out/profile_${build}_$round.log" | cut -c1-110
    "${run[@]}" timeout 600 python3 -m pagecheck.commands.serve_bench "${serve_flags[@]}" \
      --out "$out/serve_${build}_$round" > "$out/serve_${build}_$round.log" 2>&1
    echo "serve-bench exit $?"
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, re, statistics, sys
from pathlib import Path

out, rounds = Path(sys.argv[1]), int(sys.argv[2])
print("\nbuild  profile build / submit / wait ms (median of rounds)   serve-bench step median ms, decode tok/s")
for build in ("a", "b"):
    spans = []
    for r in range(1, rounds + 1):
        text = (out / f"profile_{build}_{r}.log").read_text(errors="replace")
        m = re.search(r"build ([\d.]+) ms, submit ([\d.]+) ms, wait ([\d.]+) ms", text)
        if m:
            spans.append(tuple(float(x) for x in m.groups()))
    steps, rates = [], []
    for r in range(1, rounds + 1):
        path = out / f"serve_{build}_{r}" / "serve_bench.json"
        if path.exists():
            metrics = json.loads(path.read_text())["variants"]["paged"]["metrics"]
            steps.append(metrics["decode_step_ms"]["median"])
            rates.append(metrics["decode_tokens_per_s"])
    profile = " / ".join(f"{statistics.median(s[i] for s in spans):.2f}" for i in range(3)) if spans else "none"
    serve = (f"{statistics.median(steps):.2f} ({', '.join(f'{s:.1f}' for s in steps)}), "
             f"{statistics.median(rates):.1f}" if steps else "none")
    print(f"{build}      {profile:<50}{serve}")
print("\nserve-bench decode steps by company, each round: steps, median ms (build + submit + wait medians)")
for build in ("a", "b"):
    for r in range(1, rounds + 1):
        path = out / f"serve_{build}_{r}" / "serve_bench.json"
        if not path.exists():
            continue
        groups = json.loads(path.read_text())["variants"]["paged"]["metrics"].get("decode_steps_by_company", {})
        parts = []
        for name, group in groups.items():
            if not group.get("steps"):
                continue
            split = "+".join(f"{group[key]:.2f}" for key in ("median_build_ms", "median_submit_ms", "median_wait_ms")
                             if group.get(key) is not None)
            parts.append(f"{name} {group['steps']}, {group['median_ms']:.2f}" + (f" ({split})" if split else ""))
        print(f"{build} round {r}: " + "; ".join(parts))
EOF
