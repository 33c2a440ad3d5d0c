"""The device scripts (scripts/*.sh) before any device time is spent on them: each parses, and the probe
launcher builds what it names, with the options it names, and refuses an unknown probe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_device_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_probe_launcher_refuses_an_unknown_probe(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_probe.sh"), "decoder", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "usage: gpu_probe.sh prefill|decode" in result.stderr
    assert not any(tmp_path.iterdir())  # nothing built, nothing written


@pytest.mark.parametrize("kind, source, defines", [
    ("prefill", "pagecheck/gpu/probes/prefill_wgmma_probe.cu", [[]]),
    ("decode", "pagecheck/gpu/probes/decode_split_probe.cu",
     [["-DPAGECHECK_DECODE_WARPS=4"], ["-DPAGECHECK_DECODE_WARPS=8"]]),
])
def _stand_in_nvcc(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A stand-in nvcc first on PATH: it records each command line in the returned log and writes an empty
    executable that exits 3, so the launcher's builds can be checked here and its runs fail visibly."""
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    log = tmp_path / "nvcc.log"
    fake.write_text('#!/usr/bin/env bash\necho "$@" >> "%s"\nout=""\nwhile [ $# -gt 0 ]; do\n'
                    '  [ "$1" = -o ] && out=$2; shift\ndone\nprintf "#!/bin/sh\\nexit 3\\n" > "$out"\n'
                    'chmod +x "$out"\n' % log)
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}, log


@pytest.mark.parametrize("kind, source, defines", [
    ("prefill", "pagecheck/gpu/probes/prefill_wgmma_probe.cu", [[]]),
    ("decode", "pagecheck/gpu/probes/decode_split_probe.cu",
     [["-DPAGECHECK_DECODE_WARPS=4"], ["-DPAGECHECK_DECODE_WARPS=8"]]),
])
def test_the_probe_launcher_builds_the_named_probe_for_sm90a(tmp_path, kind, source, defines):
    env, log = _stand_in_nvcc(tmp_path)
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_probe.sh"), kind, str(out)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2, result.stdout + result.stderr  # every run failed, and the launcher said so
    commands = log.read_text().splitlines()
    assert len(commands) == len(defines)
    for command, wanted in zip(commands, defines):
        words = command.split()
        assert (ROOT / source).is_file() and source in words
        assert "arch=compute_90a,code=sm_90a" in words and "ext/kernels" in words
        assert [w for w in words if w.startswith("-D")] == wanted
    assert "exit 3" in (out / "probe.log").read_text()


def test_the_probe_launcher_compiles_against_the_kernels_it_is_given(tmp_path):
    # KERNELS=DIR (an earlier build's ext/kernels, for an A/B) replaces ext/kernels on the include path.
    env, log = _stand_in_nvcc(tmp_path)
    other = tmp_path / "abtree" / "ext" / "kernels"
    other.mkdir(parents=True)
    (other / "paged_common.cuh").write_text("// stand-in\n")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_probe.sh"), "prefill", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, env={**env, "KERNELS": str(other)})
    assert result.returncode == 2, result.stdout + result.stderr
    words = log.read_text().split()
    assert words[words.index("-I") + 1] == str(other)
    assert "ext/kernels" not in words


def test_the_probe_launcher_refuses_a_kernels_folder_without_the_kernels(tmp_path):
    env, log = _stand_in_nvcc(tmp_path)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_probe.sh"), "decode", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=60, env={**env, "KERNELS": str(tmp_path)})
    assert result.returncode == 2
    assert f"KERNELS={tmp_path} holds no paged_common.cuh" in result.stderr
    assert not log.exists()  # nothing compiled
