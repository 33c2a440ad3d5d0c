"""The op's device copy of small context lengths (ext/src/paged_attention/resident_lens.h).

The copy matters on the GPU, where MLX keeps arrays of at most 8 bytes in managed memory; its
bookkeeping is the same on any stream, so it is tested here on the CPU's.
"""

import mlx.core as mx
import numpy as np
import pytest

from pagecheck import ext


@pytest.fixture(autouse=True)
def empty_memo():
    ext.forget_resident_lens()
    yield
    ext.forget_resident_lens()


@pytest.mark.parametrize("lens", [[7], [300, 0]])
def test_one_or_two_lengths_get_one_copy_with_the_same_values(lens):
    source = mx.array(lens, dtype=mx.int32)
    first = ext.device_resident_lens(source, stream=mx.cpu)
    again = ext.device_resident_lens(source, stream=mx.cpu)
    assert first is not source and first.shape == source.shape and first.dtype == mx.int32
    np.testing.assert_array_equal(np.array(first), np.array(lens, dtype=np.int32))
    # Remembered: the second call finds the first's entry instead of making another.
    np.testing.assert_array_equal(np.array(again), np.array(first))
    assert ext.resident_lens_entries() == 1


def test_another_array_with_equal_values_gets_its_own_copy():
    a, b = mx.array([5], dtype=mx.int32), mx.array([5], dtype=mx.int32)
    ext.device_resident_lens(a, stream=mx.cpu)
    ext.device_resident_lens(b, stream=mx.cpu)
    assert ext.resident_lens_entries() == 2


def test_larger_arrays_pass_through_unremembered():
    source = mx.array([1, 2, 3], dtype=mx.int32)  # 12 bytes: MLX allocates these on the device
    np.testing.assert_array_equal(np.array(ext.device_resident_lens(source, stream=mx.cpu)), [1, 2, 3])
    assert ext.resident_lens_entries() == 0


def test_the_memo_is_bounded():
    held = [mx.array([i], dtype=mx.int32) for i in range(40)]
    for source in held:
        ext.device_resident_lens(source, stream=mx.cpu)
    capacity = ext.resident_lens_entries()
    assert 0 < capacity < len(held)
    # The most recent survive: asking again for the last one adds nothing.
    ext.device_resident_lens(held[-1], stream=mx.cpu)
    assert ext.resident_lens_entries() == capacity


def test_tracers_pass_through_unremembered():
    def step(lens):
        out = ext.device_resident_lens(lens, stream=mx.cpu)
        return out * 2

    compiled = mx.compile(step)
    np.testing.assert_array_equal(np.array(compiled(mx.array([4], dtype=mx.int32))), [8])
    assert ext.resident_lens_entries() == 0


def test_paged_attention_on_the_cpu_stream_leaves_the_memo_alone():
    # The CPU kernels read the lengths where they are; only a GPU stream asks for the copy.
    q = mx.random.normal((1, 2, 1, 8), key=mx.random.key(0))
    pages = mx.random.normal((2, 1, 4, 8), key=mx.random.key(1))
    out = ext.paged_attention(q, pages, pages, mx.array([[1, 0]], dtype=mx.int32), mx.array([6], dtype=mx.int32), 4,
                              stream=mx.cpu)
    mx.eval(out)
    assert ext.resident_lens_entries() == 0
