"""The GPU programs' shared edges, on any machine."""

import json

import mlx.core as mx
import pytest

from pagecheck.gpu import program as gpu_program


@pytest.mark.skipif(mx.cuda.is_available(), reason="checks the no-CUDA answer")
def test_without_cuda_the_reason_names_the_missing_device() -> None:
    assert "no CUDA device" in gpu_program.cannot_run()
    assert "no CUDA device" in gpu_program.cannot_run(needs_gpu_clock=True)


def test_the_document_is_written_only_where_asked(tmp_path) -> None:
    path = tmp_path / "out.json"
    gpu_program.write_json(None, {"rows": [1]})
    assert not path.exists()
    gpu_program.write_json(str(path), {"rows": [1, 2]})
    assert json.loads(path.read_text()) == {"rows": [1, 2]}
