"""On a machine whose MLX has a GPU back-end, the device a run names is the one the subject computes on.

MLX built with CUDA (or Metal) starts on the GPU: a suite or a sandboxed worker asked for the CPU that did not say
so ran the subject on the GPU. Only a machine with a GPU can tell the two apart, so these run there
(scripts/gpu_verify.sh's `tests` step) and skip elsewhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from pagecheck.grading.remote_subject import close_sessions, configure
from pagecheck.grading.worker_process import WorkerSettings
from pagecheck.invariants.subject import load_subject

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not mx.is_available(mx.gpu), reason="MLX has no GPU here: nothing to tell apart")

# Appended to the course-conformant subject: every call of paged_attention notes the device it computes on.
NOTES_ITS_DEVICE = '''

_attend_on = paged_attention


def paged_attention(*args, **kwargs):
    with open(DEVICE_LOG, "a") as log:
        log.write(str(mx.default_device()) + "\\n")
    return _attend_on(*args, **kwargs)
'''


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_suite_computes_on_the_device_it_names(tmp_path: Path, device: str) -> None:
    log = tmp_path / "devices.txt"
    subject = tmp_path / "notes_its_device.py"
    conformant = (ROOT / "tests" / "subjects" / "course_conformant.py").read_text()
    subject.write_text(conformant + f"\nDEVICE_LOG = {str(log)!r}\n" + NOTES_ITS_DEVICE)
    command = [sys.executable, "-m", "pytest", "--pyargs", "pagecheck.invariants", "-q", "-p", "no:xdist",
               "-p", "no:randomly", "-p", "no:cacheprovider", "--pagecheck-subject", str(subject),
               "--pagecheck-invariant", "gqa_mapping", "--pagecheck-device", device]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert set(log.read_text().splitlines()) == {f"Device({device}, 0)"}, log.read_text()[:500]


WHERE = '''
import mlx.core as mx


def paged_attention(*args):
    return [str(mx.default_device()), str(mx.array([1.0]).sum().item())]
'''


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_a_sandboxed_worker_computes_on_the_device_it_names(tmp_path: Path, device: str) -> None:
    (tmp_path / "where.py").write_text(WHERE)
    configure(WorkerSettings(spec="{scratch}/submission/where.py", copy_in=str(tmp_path), device=device,
                             call_timeout_s=120))  # fmt: skip
    try:
        subject = load_subject(f"sandbox:{tmp_path / 'where.py'}")
        assert subject.get("paged_attention")() == [f"Device({device}, 0)", "1.0"]
    finally:
        configure(None)
        close_sessions()
