"""Compile every paged-attention kernel variant, and the serving ops' kernels, with a local nvcc, no GPU needed.

MLX's fast::cuda_kernel wraps a kernel body in a generated signature and
compiles it with NVRTC on first use, on the GPU machine. This program wraps
the bodies the same way (inputs as `const T*` plus `NAME_shape` where the
body uses it, outputs as `T*`, template arguments as constants) and runs
`nvcc -arch=sm_90 -Xptxas -v`, so syntax errors, register counts and spills
show up before any device time is spent. The warpgroup prefill, which the op
compiles itself, is compiled from the very translation unit the op builds
(pagecheck.ext.gpu_prefill_wgmma_source) for sm_90a, where ptxas also says
whether it had to serialize the warpgroup MMAs.

    python -m pagecheck.gpu.nvcc_check [--jobs N] [--filter paged_decode]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pagecheck.arg_types import positive_int
from pagecheck.gpu.kernels import KERNELS, STREAM_PROBE, KernelSource, scale_bits

# Stands in for MLX's JIT prelude (device/utils.cuh and friends): the names
# the kernel bodies rely on, nothing else.
PRELUDE = """\
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#include <cstdint>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define MAX_NDIM 10
#define WARP_SIZE 32
#define inf cuda::std::numeric_limits<float>::infinity()
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
}
"""

# The serving ops' kernels (ext/src/quantized_embedding, ext/src/qk_norm_rope), bodies without headers.
SERVING_KERNELS = {
    "quantized_embedding": KernelSource("quantized_embedding", ("ids", "weight", "scales", "biases"), ("out",), ()),
    "qk_norm_rope": KernelSource("qk_norm_rope", ("qkv", "q_norm", "k_norm", "offsets"), ("out",), ()),
}
SOURCES = {**KERNELS, STREAM_PROBE.stem: STREAM_PROBE, **SERVING_KERNELS}
CUDA_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
# Inputs whose type is not the variant's dtype.
INTEGER_INPUT_TYPES = {"block_table": "int32_t", "context_lens": "int32_t", "ids": "int32_t", "offsets": "int32_t",
                       "weight": "uint32_t"}
# The scale 0.125: SCALE_BITS, the bit pattern of its magnitude, and SCALE_NEGATIVE (any value compiles the same
# way).
SCALE = (("SCALE_BITS", 1040187392), ("SCALE_NEGATIVE", False))


@dataclass(frozen=True)
class Variant:
    stem: str
    dtype: str
    template: tuple[tuple[str, int | bool], ...]

    @property
    def label(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in self.template)
        return f"{self.stem} {self.dtype} {args}"


def input_type(source: KernelSource, name: str, dtype: str) -> str:
    return INTEGER_INPUT_TYPES.get(name, CUDA_TYPES[dtype])


# Outputs that are float32 whatever the dtype: the split decode's scratch
# (paged_decode_split_scratch.cuh) and the stream probe's checksums.
FLOAT_OUTPUTS = ("scratch", "checksum")


def output_type(name: str, dtype: str) -> str:
    # The split decode's scratch is float32 words whatever the dtype (paged_decode_split_scratch.cuh).
    return "float" if name in FLOAT_OUTPUTS else CUDA_TYPES[dtype]


WGMMA_STEM = "paged_prefill_wgmma"
# Its template, in the order of pagecheck.ext.gpu_prefill_wgmma_source's arguments after the dtype.
WGMMA_TEMPLATE = ("HEAD_DIM", "KEY_TILE", "STAGES", "WARPGROUPS", "CAUSAL", "TABLE", "SCALE_BITS", "SCALE_NEGATIVE",
                  "PRODUCER_REGISTERS")
SERIALIZED = "wgmma.mma_async instructions are serialized"
# The ring depth the launch plan gives it (tests/test_gpu_nvcc_check.py holds the two equal).
WGMMA_STAGES = 3


def wrap(variant: Variant, compact: bool = True, prelude: str = PRELUDE) -> str:
    """The translation unit MLX would build for this variant (`compact=False`: from the files as written),
    after `prelude`; for the warpgroup prefill, the one the op builds."""
    if variant.stem == WGMMA_STEM:
        from pagecheck import ext

        template = dict(variant.template)
        _, unit = ext.gpu_prefill_wgmma_source(variant.dtype, *(template[key] for key in WGMMA_TEMPLATE))
        return unit
    source = SOURCES[variant.stem]
    header, body = source.read(compact)
    params = []
    for name in source.inputs:
        params.append(f"    const {input_type(source, name, variant.dtype)}* {name}")
        if f"{name}_shape" in body:
            params.append(f"    const __grid_constant__ Shape {name}_shape")
    for name in source.outputs:
        params.append(f"    {output_type(name, variant.dtype)}* {name}")
    constants = [f"  using T = {CUDA_TYPES[variant.dtype]};"]
    for key, value in variant.template:
        kind = "bool" if isinstance(value, bool) else "int"
        text = str(value).lower() if isinstance(value, bool) else str(value)
        constants.append(f"  constexpr {kind} {key} = {text};")
    signature = ",\n".join(params)
    return (
        f"{prelude}\n{header}\nnamespace mlx::core::cu {{\n"
        f"__global__ void kernel_under_test(\n{signature}) {{\n"
        + "\n".join(constants)
        + f"\n{body}\n}}\n}}\n"
    )


def variants() -> list[Variant]:
    out: list[Variant] = []
    for dtype in CUDA_TYPES:
        for head_dim in (128, 64, 96, 256, 5):
            for rows in (1, 4, 8):
                for stem in ("paged_decode", "paged_decode_split"):
                    template = (("HEAD_DIM", head_dim), ("ROWS", rows), ("CAUSAL", True), ("MMA", False),
                                ("MMA_STAGES", 2), ("MMA_BULK", False), ("MMA_SWIZZLE", False), ("TABLE", 0), *SCALE)
                    out.append(Variant(stem, dtype, template))
            out.append(Variant("paged_prefill", dtype,
                               (("HEAD_DIM", head_dim), ("CAUSAL", True), ("TABLE", 0), *SCALE)))
    for dtype in ("bfloat16", "float16"):
        for head_dim in (128, 64, 48, 16):
            for stem in ("paged_decode", "paged_decode_split"):
                for stages, bulk, swizzle in ((2, False, True), (3, False, True), (3, False, False), (4, False, True),
                                              (3, True, False)):
                    template = (("HEAD_DIM", head_dim), ("ROWS", 16), ("CAUSAL", True), ("MMA", True),
                                ("MMA_STAGES", stages), ("MMA_BULK", bulk), ("MMA_SWIZZLE", swizzle), ("TABLE", 0),
                                *SCALE)
                    out.append(Variant(stem, dtype, template))
            for key_tile in (16, 32, 64):
                out.append(
                    Variant("paged_prefill_mma", dtype,
                            (("HEAD_DIM", head_dim), ("KEY_TILE", key_tile), ("CAUSAL", True), ("TABLE", 0), *SCALE))
                )
    out += [Variant(STREAM_PROBE.stem, "bfloat16", (("HEAD_DIM", 128), ("STAGES", 3), ("MODE", mode)))
            for mode in range(6)]  # every MODE of paged_stream.cu
    # The warpgroup prefill in each block the plan takes or may be pinned to (3 warpgroups with key tiles of
    # 64, 2 with 128, 2 with 128 beside a producer warpgroup of 56 registers a thread), at the plan's ring
    # depth, causal or not, over pages and over the dense view.
    for dtype, head_dim, (warpgroups, key_tile, producer), causal, table in itertools.product(
            ("bfloat16", "float16"), (128, 64), ((3, 64, 0), (2, 128, 0), (2, 128, 56)), (True, False), (0, 1)):
        values = (head_dim, key_tile, WGMMA_STAGES, warpgroups, causal, table, SCALE[0][1], SCALE[1][1], producer)
        out.append(Variant(WGMMA_STEM, dtype, tuple(zip(WGMMA_TEMPLATE, values))))
    for dtype in CUDA_TYPES:
        out += [Variant("quantized_embedding", dtype, (("BITS", bits), ("GROUP_SIZE", group)))
                for bits in (4, 8) for group in (64, 128)]
        # Qwen3-0.6B's heads and a small model's; eps 1e-6 and log2 of a rope base of 10^6 as float32 bit
        # patterns (both positive, so scale_bits' magnitude is the whole pattern).
        out += [Variant("qk_norm_rope", dtype, (("HEAD_DIM", head_dim), ("NUM_Q_HEADS", q_heads),
                                                ("NUM_KV_HEADS", kv_heads), ("EPS_BITS", scale_bits(1e-6)[0]),
                                                ("LOG2_BASE_BITS", scale_bits(math.log2(1e6))[0])))
                for head_dim, q_heads, kv_heads in ((128, 16, 8), (64, 4, 2))]
    return out


RESOURCE = re.compile(r"Used (\d+) registers.*")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
STACK = re.compile(r"(\d+) bytes stack frame")


def text_sections(elf: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of each .text section of a 64-bit little-endian ELF file (a cubin)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = header(shstrndx)
    found = []
    for i in range(shnum):
        name_at, offset, size = header(i)
        name = elf[names_at + name_at: elf.index(b"\0", names_at + name_at)].decode()
        if name.startswith(".text"):
            found.append((name, elf[offset: offset + size]))
    return found


def code_digest(cubin: Path) -> str:
    """A digest of the kernel's machine code (the cubin's .text sections; the rest of the file holds a
    per-compile id): equal digests before and after a refactor mean the GPU runs the same code."""
    digest = hashlib.sha1()
    for name, code in text_sections(cubin.read_bytes()):
        digest.update(name.encode() + code)
    return digest.hexdigest()[:12]


def compile_one(
    nvcc: str, variant: Variant, workdir: Path, with_digest: bool = False, compact: bool = True
) -> tuple[Variant, bool, str]:
    path = workdir / f"{hashlib.sha1(f'{variant.label} {compact}'.encode()).hexdigest()[:16]}.cu"
    path.write_text(wrap(variant, compact))
    # Relative names, run in the work folder: the cubin then holds no temporary path.
    arch = "sm_90a" if variant.stem == WGMMA_STEM else "sm_90"
    result = subprocess.run(
        [nvcc, f"-arch={arch}", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", path.with_suffix(".cubin").name,
         path.name],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    log = result.stdout + result.stderr
    if result.returncode != 0:
        return variant, False, log
    regs = RESOURCE.search(log)
    spill = SPILL.search(log)
    stack = STACK.search(log)
    summary = (
        f"regs={regs.group(1) if regs else '?'} "
        f"spill_st={spill.group(1) if spill else '?'} spill_ld={spill.group(2) if spill else '?'} "
        f"stack={stack.group(1) if stack else '?'}"
    )
    if variant.stem == WGMMA_STEM:
        summary += f" wgmma_serialized={'yes' if SERIALIZED in log else 'no'}"
    if with_digest:
        summary += f" code={code_digest(path.with_suffix('.cubin'))}"
    return variant, True, summary


def report(results: Iterable[tuple[Variant, bool, str]], total: int, compiler: str = "") -> int:
    """Prints a line per (variant, compiled, text) as each arrives (text: a summary, or the log of a failure)
    and the count; the exit status: 1 where one failed."""
    failures = 0
    for done, (variant, ok, text) in enumerate(results, 1):
        if ok:
            print(f"ok    [{done}/{total}] {variant.label}" + (f": {text}" if text else ""))
        else:
            failures += 1
            print(f"FAIL  [{done}/{total}] {variant.label}\n{text}")
    print(f"{total - failures}/{total} variants compiled" + (f" with {compiler}" if compiler else ""))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=positive_int, default=2)
    parser.add_argument("--filter", default="", help="only variants whose label contains this text")
    parser.add_argument("--digest", action="store_true",
                        help="also print a digest of each variant's compiled code (equal digests before and after "
                             "a refactor: the GPU runs the same code)")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not found on PATH")
        return 2
    chosen = [v for v in variants() if args.filter in v.label]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        return report(pool.map(lambda v: compile_one(nvcc, v, Path(tmp), args.digest), chosen), len(chosen))


if __name__ == "__main__":
    sys.exit(main())
