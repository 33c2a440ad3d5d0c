"""The CUDA attention op's kernel header as a file NVRTC includes (ext/src/common/kernel_header_file.*).

MLX rebuilds a custom kernel's whole source into every call, so the op hands
it a one-line #include of the 44 KB header instead of the text. The file must
hold exactly the header, live where only this user can write, and keep one
path per build (MLX names a kernel's module after a hash of its source);
anything else means the text itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import mlx.core as mx
import pytest

from pagecheck import ext

INCLUDE = re.compile(r'#include "(?P<path>[^"]+)"\n')


def included_path(line: str | None) -> Path:
    assert line is not None
    match = INCLUDE.fullmatch(line)
    assert match, line
    return Path(match["path"])


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def test_the_file_holds_the_text_in_a_directory_private_to_the_user_and_build(temp_dir: Path) -> None:
    text = "#define A 1\n__device__ int f() { return A; }\n"
    path = included_path(ext.kernel_header_include("paged_decode", text))
    assert path.read_text() == text and path.name == "paged_decode.cuh"
    build_dir, user_dir = path.parent, path.parent.parent
    assert user_dir == temp_dir / f"pagecheck-{os.geteuid()}"
    assert re.fullmatch(r"[0-9a-f]{8,}", build_dir.name), build_dir  # the kernel sources' digest
    for directory in (build_dir, user_dir):
        assert directory.stat().st_mode & 0o777 == 0o700


def test_one_path_per_stem_and_a_changed_file_is_written_again(temp_dir: Path) -> None:
    first = ext.kernel_header_include("paged_prefill", "int a;\n")
    path = included_path(first)
    path.write_text("int tampered;\n")
    assert ext.kernel_header_include("paged_prefill", "int a;\n") == first
    assert path.read_text() == "int a;\n"
    assert included_path(ext.kernel_header_include("paged_decode", "int b;\n")).parent == path.parent


def test_a_directory_others_may_write_or_a_link_is_never_used(temp_dir: Path) -> None:
    user_dir = temp_dir / f"pagecheck-{os.geteuid()}"
    user_dir.mkdir(mode=0o700)
    user_dir.chmod(0o777)
    assert ext.kernel_header_include("paged_decode", "int a;\n") is None
    user_dir.rmdir()
    elsewhere = temp_dir / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    user_dir.symlink_to(elsewhere)
    assert ext.kernel_header_include("paged_decode", "int a;\n") is None
    assert not any(elsewhere.iterdir())
    user_dir.unlink()
    user_dir.mkdir(mode=0o700)
    build_dir = included_path(ext.kernel_header_include("paged_decode", "int a;\n")).parent
    build_dir.chmod(0o755)
    assert ext.kernel_header_include("paged_decode", "int a;\n") is None


def test_a_temp_path_an_include_cannot_quote_is_refused(tmp_path: Path, monkeypatch) -> None:
    quoted = tmp_path / 'a"b'
    quoted.mkdir()
    monkeypatch.setenv("TMPDIR", str(quoted))
    assert ext.kernel_header_include("paged_decode", "int a;\n") is None


@pytest.mark.skipif(mx.is_available(mx.gpu), reason="a GPU build loads NVRTC")
def test_without_nvrtc_the_op_keeps_the_header_text() -> None:
    assert ext.nvrtc_reads_header_files() is False


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit)")
def test_an_included_header_compiles_to_the_same_machine_code(temp_dir: Path, tmp_path: Path) -> None:
    from pagecheck.gpu import nvcc_check

    variant = next(v for v in nvcc_check.variants() if v.stem == "paged_decode_split" and ("MMA", True) in v.template)
    unit = nvcc_check.wrap(variant)
    header, _ = nvcc_check.SOURCES[variant.stem].read(True)
    assert header in unit
    line = ext.kernel_header_include("paged_decode_split", header)
    codes = []
    for name, source in (("inline", unit), ("included", unit.replace(header, line))):
        (tmp_path / f"{name}.cu").write_text(source)
        subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-cubin", "-o", str(tmp_path / f"{name}.cubin"),
                        str(tmp_path / f"{name}.cu")], check=True, capture_output=True)
        codes.append(nvcc_check.text_sections((tmp_path / f"{name}.cubin").read_bytes()))
    assert len(unit.replace(header, line)) < len(unit) / 5
    assert codes[0] == codes[1]
