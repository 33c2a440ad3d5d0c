"""gpu_nvcc_check: the kernel wrapper and the machine-code digest, and (where nvcc is installed, as on CI's
machine) the op's own kernel variants compiled for sm_90 without register spills."""

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels
from pagecheck.gpu import nvcc_check as gpu_nvcc_check


def tiny_elf(sections: list[tuple[str, bytes]]) -> bytes:
    """A 64-bit little-endian ELF file holding only these sections (after the null one) and their names."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, _ in sections) + b".shstrtab\0"
    body, headers, at = b"", [(0, 0, 0, 0)], 64
    name_at = 1
    for name, data in sections:
        headers.append((name_at, 1, at + len(body), len(data)))
        body += data
        name_at += len(name) + 1
    headers.append((name_at, 3, at + len(body), len(names)))
    body += names
    shoff = at + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    elf_header = ident + struct.pack("<HHIQQQIHHHHHH", 1, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers),
                                     len(headers) - 1)
    table = b"".join(struct.pack("<IIQQQQIIQQ", n, kind, 0, 0, off, size, 0, 0, 1, 0) for n, kind, off, size in headers)
    return elf_header + body + table


def test_text_sections_are_read_by_name():
    elf = tiny_elf([(".text.kernel", b"\x01\x02\x03"), (".note.id", b"random"), (".text.other", b"\x04")])
    assert gpu_nvcc_check.text_sections(elf) == [(".text.kernel", b"\x01\x02\x03"), (".text.other", b"\x04")]


def test_the_digest_follows_the_code_and_ignores_the_rest(tmp_path):
    def digest(*sections):
        path = tmp_path / "k.cubin"
        path.write_bytes(tiny_elf(list(sections)))
        return gpu_nvcc_check.code_digest(path)

    same = digest((".text.k", b"\x01\x02"), (".note.id", b"run 1"))
    assert same == digest((".text.k", b"\x01\x02"), (".note.id", b"run 2"))
    assert same != digest((".text.k", b"\x01\x03"), (".note.id", b"run 1"))


def test_every_variant_wraps_its_kernel_in_a_signature():
    variants = gpu_nvcc_check.variants()
    assert {v.stem for v in variants} == {
        "paged_decode", "paged_decode_split", "paged_prefill", "paged_prefill_mma", "paged_prefill_wgmma",
        "paged_stream", "quantized_embedding", "qk_norm_rope"}
    split = next(v for v in variants if v.stem == "paged_decode_split")
    source = gpu_nvcc_check.wrap(split)
    assert "float* scratch" in source and "kernel_under_test" in source
    probe = gpu_nvcc_check.wrap(next(v for v in variants if v.stem == "paged_stream"))
    assert "float* checksum" in probe and "__nv_bfloat16* key_pages" in probe
    bulk = [v for v in variants if ("MMA_BULK", True) in v.template]
    assert bulk and all(("MMA", True) in v.template for v in bulk)
    # The warpgroup prefill is the op's own translation unit: an extern "C" entry point named after the variant.
    wgmma = next(v for v in variants if v.stem == "paged_prefill_wgmma")
    unit = gpu_nvcc_check.wrap(wgmma)
    assert 'extern "C" __global__' in unit and "pagecheck_paged_prefill_wgmma_" in unit
    # The serving ops' integer inputs keep their own types whatever the dtype.
    embedding = gpu_nvcc_check.wrap(next(v for v in variants if v.stem == "quantized_embedding"))
    assert "const int32_t* ids" in embedding and "const uint32_t* weight" in embedding
    rope = gpu_nvcc_check.wrap(next(v for v in variants if v.stem == "qk_norm_rope" and v.dtype == "bfloat16"))
    assert "const int32_t* offsets" in rope and "const __nv_bfloat16* qkv" in rope


NVCC = shutil.which("nvcc")

# The op's own choices at the benchmark's head dim, one per kernel and walk: the tensor-core decode walk
# with its 3-stage cp.async ring (one pass with swizzled rows, as grids of two blocks per multiprocessor
# take it; split with padded rows, as B 1's grid of one block per multiprocessor does), the CUDA-core walk float32 takes, both prefills.
OP_VARIANTS = {
    "tensor-core decode": ("paged_decode", "bfloat16", {"HEAD_DIM": 128, "MMA": True, "MMA_STAGES": 3,
                                                        "MMA_BULK": False, "MMA_SWIZZLE": True}),
    "tensor-core split": ("paged_decode_split", "float16", {"HEAD_DIM": 128, "MMA": True, "MMA_STAGES": 3,
                                                            "MMA_BULK": False, "MMA_SWIZZLE": False}),
    "CUDA-core decode": ("paged_decode", "float32", {"HEAD_DIM": 128, "ROWS": 4, "MMA": False}),
    "CUDA-core split": ("paged_decode_split", "float32", {"HEAD_DIM": 128, "ROWS": 8, "MMA": False}),
    "tensor-core prefill": ("paged_prefill_mma", "bfloat16", {"HEAD_DIM": 128, "KEY_TILE": 64}),
    "CUDA-core prefill": ("paged_prefill", "float32", {"HEAD_DIM": 128}),
}


def op_variant(stem: str, dtype: str, wanted: dict) -> gpu_nvcc_check.Variant:
    (found,) = [v for v in gpu_nvcc_check.variants()
                if v.stem == stem and v.dtype == dtype and wanted.items() <= dict(v.template).items()]
    return found


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("name", sorted(OP_VARIANTS))
def test_the_ops_kernels_compile_for_sm90_without_spills(tmp_path, name):
    variant, ok, summary = gpu_nvcc_check.compile_one(NVCC, op_variant(*OP_VARIANTS[name]), tmp_path)
    assert ok, summary[-3000:]
    assert "spill_st=0 spill_ld=0" in summary, f"{variant.label}: {summary}"
    template = dict(variant.template)
    if variant.stem.startswith("paged_decode"):
        # The split rule counts resident blocks from these figures (the planner's walk_registers).
        registers = int(re.search(r"regs=(\d+)", summary).group(1))
        assert registers <= ext.gpu_walk_registers(template["MMA"], template["ROWS"]), summary


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("stem", ["quantized_embedding", "qk_norm_rope"])
def test_the_serving_ops_kernels_compile_for_sm90_without_spills(tmp_path, stem):
    for variant in (v for v in gpu_nvcc_check.variants() if v.stem == stem and v.dtype == "bfloat16"):
        _, ok, summary = gpu_nvcc_check.compile_one(NVCC, variant, tmp_path)
        assert ok, summary[-3000:]
        assert "spill_st=0 spill_ld=0" in summary, f"{variant.label}: {summary}"


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("stem", ["paged_decode", "paged_decode_split", "paged_stream"])
def test_the_decode_ring_starts_on_a_128_byte_line(tmp_path, stem):
    # SharedRows' swizzle assumes it: a ring 16 bytes in (after the split kernel's static flag) doubled the
    # L2 sectors its copies asked for on the H200 (ext/kernels/NOTES.md). The stream probe times the
    # same copies, so it keeps the same ring.
    if stem == "paged_stream":
        variant = next(v for v in gpu_nvcc_check.variants() if v.stem == stem and ("MODE", 0) in v.template)
    else:
        variant = op_variant(stem, "bfloat16", {"HEAD_DIM": 128, "MMA": True, "MMA_STAGES": 3, "MMA_BULK": False,
                                                "MMA_SWIZZLE": True})
    source = tmp_path / "kernel.cu"
    source.write_text(gpu_nvcc_check.wrap(variant))
    result = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-ptx", "-o", "kernel.ptx", "kernel.cu"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    declarations = re.findall(r"\.extern \.shared \.align (\d+)", (tmp_path / "kernel.ptx").read_text())
    assert declarations == ["128"], declarations


def test_compacting_drops_comments_and_blanks_and_keeps_literals_and_lines():
    source = (
        "#define PAIR(x) \\\n"
        "    (x + 1)  // trailing note\n"
        "\n"
        "/* a block\n"
        "   comment */ int a = 1; // note\n"
        'const char* s = "no // comment /* here */"; char q = \'"\'; char e = \'\\\'\';\n'
        "#define EMPTY \\\n"
        "\n"
        "int b;\n"
    )
    assert ext.compact_kernel_source(source) == (
        "#define PAIR(x) \\\n"
        "(x + 1)\n"
        "int a = 1;\n"
        'const char* s = "no // comment /* here */"; char q = \'"\'; char e = \'\\\'\';\n'
        "#define EMPTY \\\n"
        "\n"  # the blank line that ends the macro stays
        "int b;\n"
    )


def test_the_op_hands_mlx_compacted_kernels():
    source = gpu_nvcc_check.SOURCES["paged_decode_split"]
    (raw_header, raw_body), (header, body) = source.read(compact=False), source.read()
    assert "//" in raw_body and "//" not in body
    assert len(header) + len(body) < 0.75 * (len(raw_header) + len(raw_body))


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("name", ["tensor-core decode", "tensor-core prefill", "CUDA-core split"])
def test_compacted_kernels_compile_to_the_same_machine_code(tmp_path, name):
    digests = []
    for compact in (False, True):
        _, ok, summary = gpu_nvcc_check.compile_one(
            NVCC, op_variant(*OP_VARIANTS[name]), tmp_path, with_digest=True, compact=compact)
        assert ok, summary[-3000:]
        digests.append(re.search(r"code=(\w+)", summary).group(1))
    assert digests[0] == digests[1]


@pytest.mark.parametrize("batch, query_len", [(1, 512), (4, 2048)])
def test_the_checked_warpgroup_prefill_has_the_plans_ring_depth(batch, query_len):
    from pagecheck import ext

    plan = ext.gpu_launch_plan(batch, 32, query_len, 128, 8, 128, 64, "bfloat16", warpgroup_mma=True)
    assert plan["schedule"] == "paged_prefill_wgmma"
    assert plan["mma_stages"] == gpu_nvcc_check.WGMMA_STAGES


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("warpgroups, key_tile, producer", [(2, 128, 0), (3, 64, 0), (2, 128, 56)])
def test_the_warpgroup_prefill_compiles_for_sm90a_without_spills_or_serialized_mma(tmp_path, warpgroups, key_tile,
                                                                                  producer):
    # The plan's two block heights at the benchmark's shape, and the pinned block with a producer warpgroup. A
    # spill, or ptxas serializing the warpgroup MMAs (a function call in the kernel, or too few registers), would
    # cost the kernel most of its speed.
    wanted = {"HEAD_DIM": 128, "KEY_TILE": key_tile, "WARPGROUPS": warpgroups, "CAUSAL": True, "TABLE": 0,
              "PRODUCER_REGISTERS": producer}
    variant, ok, summary = gpu_nvcc_check.compile_one(NVCC, op_variant("paged_prefill_wgmma", "bfloat16", wanted),
                                                      tmp_path)
    assert ok, summary[-3000:]
    assert "spill_st=0 spill_ld=0" in summary and "wgmma_serialized=no" in summary, f"{variant.label}: {summary}"


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
def test_the_warpgroup_prefill_probe_compiles_for_sm90a(tmp_path):
    # `scripts/gpu_probe.sh prefill` builds this program on the device; it includes the kernel body as the op
    # does, so a kernel change that breaks it (or spills, or makes ptxas serialize the warpgroup MMAs) shows
    # here, before any device time is spent.
    probe = Path(gpu_kernels.__file__).resolve().parent / "probes" / "prefill_wgmma_probe.cu"
    result = subprocess.run(
        [NVCC, "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", f"-I{gpu_kernels.KERNEL_DIR}",
         f"-I{probe.parent}", "-Xptxas", "-v", "-c", str(probe), "-o", str(tmp_path / "probe.o")],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "spill" in result.stderr and not re.search(r"[1-9]\d* bytes spill", result.stderr), result.stderr[-3000:]
    assert gpu_nvcc_check.SERIALIZED not in result.stderr, result.stderr[-3000:]


@pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH: the CUDA toolkit's compiler checks the kernels "
                    "without a GPU")
@pytest.mark.parametrize("warps", [4, 8])
def test_the_split_decode_probe_compiles_for_sm90a_without_spills(tmp_path, warps):
    # `scripts/gpu_probe.sh decode` builds this program on the device at both block sizes; it includes the split
    # decode's body as the op does, so a kernel change that breaks it (or spills at 8 warps) shows here.
    probes = Path(gpu_kernels.__file__).resolve().parent / "probes"
    result = subprocess.run(
        [NVCC, "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", f"-I{gpu_kernels.KERNEL_DIR}",
         f"-I{probes}", f"-DPAGECHECK_DECODE_WARPS={warps}", "-Xptxas", "-v", "-c",
         str(probes / "decode_split_probe.cu"), "-o", str(tmp_path / "probe.o")],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "spill" in result.stderr and not re.search(r"[1-9]\d* bytes spill", result.stderr), result.stderr[-3000:]
