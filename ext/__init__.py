"""pagecheck's C++ MLX extension: paged and dense attention ops, the quantized embedding lookup, a Qwen3
layer's fused q/k norm and rotary embedding, and the one GPU launch planner (`gpu_launch_plan` and its
figures), which the Python launcher pagecheck/gpu/kernels.py asks.

mlx.core is imported first: it loads libmlx.so and registers the array type
that the extension's bindings share (nanobind domain "mlx").
"""

import mlx.core  # noqa: F401  (must precede the extension module)

from pagecheck.ext._ext import (
    build_info,
    compact_kernel_source,
    dense_attention,
    device_resident_lens,
    forget_resident_lens,
    forget_validated_metadata,
    gpu_decode_shared_bytes,
    gpu_launch_plan,
    gpu_plan_constants,
    gpu_prefill_wgmma_kernel,
    gpu_prefill_wgmma_source,
    gpu_takes_tensor_cores,
    gpu_takes_warpgroup_mma,
    gpu_warpgroup_mma,
    gpu_walk_registers,
    kernel_header_include,
    nvrtc_reads_header_files,
    paged_attention,
    paged_inputs_validated,
    qk_norm_rope,
    quantized_embedding,
    remember_valid_paged_inputs,
    resident_lens_entries,
    reuse_kernel_nodes,
    validated_metadata_entries,
    validated_paged_attention,
)

__all__ = [
    "build_info", "compact_kernel_source", "dense_attention", "device_resident_lens", "forget_resident_lens",
    "forget_validated_metadata", "gpu_decode_shared_bytes",
    "gpu_launch_plan", "gpu_plan_constants", "gpu_prefill_wgmma_kernel", "gpu_prefill_wgmma_source",
    "gpu_takes_tensor_cores", "gpu_takes_warpgroup_mma",
    "gpu_walk_registers", "gpu_warpgroup_mma", "kernel_header_include", "nvrtc_reads_header_files",
    "paged_attention",
    "paged_inputs_validated", "qk_norm_rope", "quantized_embedding", "remember_valid_paged_inputs", "resident_lens_entries",
    "reuse_kernel_nodes",
    "validated_metadata_entries",
    "validated_paged_attention",
]
