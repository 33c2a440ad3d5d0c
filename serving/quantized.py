"""Affine 4-bit (or 8-bit) weights as mx.quantize stores them, and the two ways the model reads them.

A matrix [rows, cols] is packed along cols: every group of `group_size`
consecutive values of a row shares one scale and one bias. Linear layers read
it through mx.quantized_matmul; the token embedding reads single rows through
the extension's one-dispatch quantized_embedding, so the table is never
dequantized as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from pagecheck import ext

DEFAULT_GROUP_SIZE = 128
DEFAULT_BITS = 4


@dataclass(frozen=True)
class QuantizedMatrix:
    weight: mx.array  # uint32 [rows, cols * bits / 32]
    scales: mx.array  # [rows, cols / group_size], the activation dtype
    biases: mx.array
    group_size: int
    bits: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.weight.shape[0], self.weight.shape[1] * 32 // self.bits

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + self.scales.nbytes + self.biases.nbytes

    def row_range(self, start: int, stop: int) -> QuantizedMatrix:
        """Rows [start, stop) as a view of this matrix (each row's groups are its own)."""
        return QuantizedMatrix(
            weight=self.weight[start:stop], scales=self.scales[start:stop], biases=self.biases[start:stop],
            group_size=self.group_size, bits=self.bits,
        )

    def dequantize(self) -> mx.array:
        return mx.dequantize(self.weight, self.scales, self.biases, group_size=self.group_size, bits=self.bits)


def quantize_matrix(
    w: mx.array, group_size: int = DEFAULT_GROUP_SIZE, bits: int = DEFAULT_BITS
) -> QuantizedMatrix:
    """Quantize w [rows, cols]; scales and biases keep w's dtype."""
    if w.ndim != 2 or w.shape[1] % group_size:
        raise ValueError(f"w shape={tuple(w.shape)} must be 2-D with cols a multiple of group_size={group_size}")
    weight, scales, biases = mx.quantize(w, group_size=group_size, bits=bits)
    return QuantizedMatrix(weight=weight, scales=scales, biases=biases, group_size=group_size, bits=bits)


def stack_rows(matrices: list[QuantizedMatrix]) -> QuantizedMatrix:
    """One matrix holding the rows of each in turn, so that one matmul computes all their outputs."""
    first = matrices[0]
    if any((m.group_size, m.bits, m.shape[1]) != (first.group_size, first.bits, first.shape[1]) for m in matrices):
        raise ValueError("stack_rows needs matrices of one column count, group size and bit width")
    return QuantizedMatrix(
        weight=mx.concatenate([m.weight for m in matrices]),
        scales=mx.concatenate([m.scales for m in matrices]),
        biases=mx.concatenate([m.biases for m in matrices]),
        group_size=first.group_size, bits=first.bits,
    )


def quantized_linear(x: mx.array, matrix: QuantizedMatrix) -> mx.array:
    """x [..., cols] @ matrix.T -> [..., rows].

    A matrix whose rows are one group each (cols == group_size, only in toy models) is dequantized and
    multiplied instead: on MLX 0.32.4's CUDA back-end mx.quantized_matmul returned wrong values for such
    a matrix from two input rows up (max error 2-5 on outputs of magnitude 2-3 at cols 64, group 64;
    right at cols 64 with group 32 and at cols 128+ with group 64; measured on the H200, ext/kernels/NOTES.md).
    """
    if matrix.shape[1] == matrix.group_size:
        return x @ matrix.dequantize().T
    return mx.quantized_matmul(
        x, matrix.weight, matrix.scales, matrix.biases, transpose=True,
        group_size=matrix.group_size, bits=matrix.bits,
    )


def embedding_lookup(ids: mx.array, table: QuantizedMatrix) -> mx.array:
    """Rows `ids` (any shape) of the dequantized table: ids.shape + [cols], one extension dispatch."""
    if not isinstance(ids, mx.array) or not mx.issubdtype(ids.dtype, mx.integer):
        raise ValueError(f"ids must be an integer mlx array, got {getattr(ids, 'dtype', type(ids).__name__)}")
    return ext.quantized_embedding(
        ids.astype(mx.int32), table.weight, table.scales, table.biases, table.group_size, table.bits
    )
