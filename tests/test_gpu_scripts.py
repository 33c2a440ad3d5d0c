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
def test_the_probe_launcher_builds_the_named_probe_for_sm90a(tmp_path, kind, source, defines):
    # A stand-in nvcc records each command line and writes an empty executable, so the launcher's builds can
    # be checked here; its runs then fail (the stand-in programs exit 3) and the launcher says which.
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    log = tmp_path / "nvcc.log"
    fake.write_text('#!/usr/bin/env bash\necho "$@" >> "%s"\nout=""\nwhile [ $# -gt 0 ]; do\n'
                    '  [ "$1" = -o ] && out=$2; shift\ndone\nprintf "#!/bin/sh\\nexit 3\\n" > "$out"\n'
                    'chmod +x "$out"\n' % log)
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
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
