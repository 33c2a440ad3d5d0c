"""Runtime anti-cheat inside the worker: MLX's fused SDPA trapped, dense gathers of K/V pages watched.

The worker receives this module's source over the pipe (it may not import
pagecheck), so it imports only the standard library at module level.

- The SDPA trap replaces mlx.core.fast.scaled_dot_product_attention before
  the subject is imported. The real function is dropped, not kept anywhere
  (no `.original`, no closure): nothing in the worker can call it. Each call
  of the trap raises, and is reported at once unless it comes while the
  subject is imported.
- The gather watch wraps the MLX and NumPy functions and array methods that
  gather, join, index, convert or reshape arrays. During a call of the
  subject's paged_attention it follows which arrays derive from key_pages or
  value_pages, and reports an array derived from them that holds at least a
  whole request's K or V: H_kv x D x T elements with D among its last two
  dimensions, where T is the shortest context longer than one page. Reading
  one page at a time never gets there; gathering a request's pages into one
  array with the wrapped functions does, however they are named (getattr
  names, fancy indexing, a detour through NumPy). A call whose contexts all
  fit in one page is not judged. A whole pool cast, copied, converted or
  reshaped (WHOLE_ARRAY_OPS, as many elements as the pool) is not a request's
  K/V: it stands for the pool, and what is gathered from it is judged.
  Elementwise arithmetic keeps a whole pool a whole pool (`key_pages + 0` is
  a copy of it), and a contraction fed a whole pool is judged (a one-hot
  matrix times the pool gathers); an MLX array, or a NumPy array made during
  the call (NUMPY_MAKERS), written in place with page data
  (`dense[:, a:b] = key_pages[p]`, np.copyto) is judged whole (a NumPy view's
  write, as the array it views), so pages copied one by one into a
  preallocated array are a gather; on one page's slice neither is judged,
  since that is the page walk itself. The watch follows only what the
  wrapped functions and properties make (NumPy arithmetic and matmul are
  followed on arrays it already follows, through their ufuncs; np.dot,
  np.einsum and NumPy's other contractions are wrapped and judged as MLX's
  are; `.T` is followed on both libraries' arrays): MLX ops it does not wrap
  (mx.array(...) copies, for one, which nanobind builds without a Python
  hook) and NumPy functions and methods it does not wrap are not, so a
  gather from such a copy goes unseen.
  Other names loaded NumPy and MLX modules hold for the same gathering
  functions (numpy._core.multiarray.concatenate) point at the wrappers too,
  and mx.concat is wrapped as mx.concatenate is. The wrappers' closures hold
  the original functions and the watch itself, and Python code can read a
  closure without any audit event: a submission that calls the originals, or
  switches the watch off, is not watched at all. It catches the usual ways of
  gathering, not every one.

Both report through a callback that writes an event frame to the pipe the
moment it happens, so code that runs later in the same call cannot take a
report back; the worker's frame writer is made before the subject loads
(wire.frame_writer), so rebinding the wire module's names, os.write or
json's does not silence a report either.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

SDPA_NAME = "scaled_dot_product_attention"
SDPA_MESSAGE = (
    "mx.fast.scaled_dot_product_attention is not allowed in graded code: "
    "paged attention must read K/V through the block table itself"
)
# slice_update and put_along_axis are the functional form of `target[index] = value`: pages written one by
# one into a preallocated array gather a request as surely as a concatenate does.
MLX_GATHERS = ("take", "take_along_axis", "concatenate", "concat", "stack", "split", "repeat", "tile", "pad",
               "broadcast_to", "slice", "slice_update", "put_along_axis")  # fmt: skip
# Elementwise arithmetic: a whole pool through it is still a whole pool (`key_pages + 0` is a copy); on a part
# of the pages its result stays derived but is not judged (it is compute on what was already read).
MLX_ELEMENTWISE = ("add", "subtract", "multiply", "divide", "negative", "abs", "maximum", "minimum", "clip",
                   "power", "square")  # fmt: skip
ARRAY_ELEMENTWISE = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                     "__rtruediv__", "__neg__", "__abs__", "__pow__")  # fmt: skip
# Contractions: judged when a whole pool goes in (a one-hot matrix times the pool is a gather), ignored on a
# page's slice (q @ k of one page is the page walk itself).
MLX_CONTRACTIONS = ("matmul", "einsum", "tensordot", "inner", "outer", "addmm", "gather_mm", "kron",
                    "block_masked_mm", "segmented_mm")  # fmt: skip
ARRAY_CONTRACTIONS = ("__matmul__",)
NUMPY_CONTRACTIONS = ("dot", "einsum", "tensordot", "inner", "outer", "vdot", "kron")
# The wrapped ops that neither select nor reorder positions: cast, copy, convert, view or reshape an array
# whole. Their result, when it has as many elements as a whole pool it came from, stands for that pool (is
# not judged, and what is gathered from it is). A whole pool read in float32 or as NumPy is no request's
# dense K/V.
MLX_WHOLE = ("reshape", "transpose", "swapaxes", "moveaxis", "flatten", "unflatten", "squeeze", "expand_dims",
             "contiguous", "view", "copy", "stop_gradient", "where")  # fmt: skip
ARRAY_WHOLE = ("reshape", "transpose", "swapaxes", "moveaxis", "flatten", "squeeze", "astype", "view", "__array__")
ARRAY_PROPERTIES = ("T",)  # the array's properties that show it whole under another shape
# NumPy array methods followed on arrays derived from the pages (a NumPy array derived from them is a watched
# subclass): those that show or copy it whole, and those that gather.
NDARRAY_WHOLE = ("reshape", "transpose", "swapaxes", "astype", "copy", "flatten", "ravel", "squeeze")
NDARRAY_GATHERS = ("take", "repeat", "compress")
NUMPY_WHOLE = ("array", "asarray", "asanyarray", "ascontiguousarray", "copy", "reshape", "transpose", "swapaxes",
               "moveaxis", "squeeze", "expand_dims")  # fmt: skip
MLX_RESHAPES = (*MLX_WHOLE, "as_strided")
ARRAY_METHODS = ("__getitem__", "split", *ARRAY_WHOLE)
NUMPY_GATHERS = ("concatenate", "stack", "vstack", "hstack", "dstack", "take", "take_along_axis", "repeat", "tile",
                 "broadcast_to", "pad", "frombuffer")  # fmt: skip
NUMPY_FUNCTIONS = (*NUMPY_WHOLE, *NUMPY_GATHERS, *NUMPY_CONTRACTIONS)
# NumPy's array makers: during a call their arrays come back as the watched subclass, so that pages written into
# one in place (`dense[:, a:b] = pages[p]`, which no module function sees on a plain array) are judged as MLX's
# `__setitem__` is. np.copyto is that write as a function, judged on the array its target views.
NUMPY_MAKERS = ("zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like")
NUMPY_ASSIGNS = ("copyto",)
# Where else a loaded module holds the very same gathering functions (numpy._core.multiarray.concatenate is
# numpy.concatenate): those names are pointed at the wrappers too. Conversions are not (NumPy's own code
# converts with them, and must keep getting plain arrays).
ALIAS_MODULES = ("numpy", "mlx")


def _ops(prefix: str, names: tuple[str, ...]) -> list[str]:
    """The op names the wrappers report: `prefix` + each name."""
    return [f"{prefix}.{name}" for name in names]


WHOLE_ARRAY_OPS = frozenset(
    _ops("mlx.core", MLX_WHOLE) + _ops("mlx.core.array", (*ARRAY_WHOLE, *ARRAY_PROPERTIES)) + _ops("numpy", NUMPY_WHOLE)
    + _ops("numpy.ndarray", (*NDARRAY_WHOLE, *ARRAY_PROPERTIES))
)
ELEMENTWISE_OPS = frozenset(
    _ops("mlx.core", MLX_ELEMENTWISE) + _ops("mlx.core.array", ARRAY_ELEMENTWISE)
    + ["numpy.ufunc"]  # every NumPy ufunc but matmul is elementwise
)
CONTRACTION_OPS = frozenset(
    _ops("mlx.core", MLX_CONTRACTIONS) + _ops("mlx.core.array", ARRAY_CONTRACTIONS) + ["numpy.matmul"]
    + _ops("numpy", NUMPY_CONTRACTIONS)
)
MAX_REPORTS_PER_CALL = 8

Report = Callable[[dict[str, Any]], None]


class ForbiddenCallError(RuntimeError):
    """The subject called a function the assignment forbids."""


def caller_location(depth: int) -> str:
    """'file:line' of the frame `depth` levels above the caller of this function."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return "?:0"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class GatherWatch:
    """One paged_attention call: which arrays derive from the pages, and how big a dense gather is."""

    def __init__(
        self, key_pages: Any, value_pages: Any, context_lens: Any, report: Report,
        shape_of: Callable[[Any], tuple[int, ...]] = lambda array: tuple(getattr(array, "shape", ())),
        lengths_of: Callable[[Any], list[int]] | None = None,
        root_of: Callable[[Any], Any] = lambda array: array,
    ) -> None:
        """`shape_of` and `lengths_of` read the call's pages and context lengths with functions taken before the
        submission loaded (Tripwires.install_gather_watch): looked up at the call, a rebinding of the submission's
        (numpy.array raising only for this caller) switched the watch off for every call. `root_of` gives the array
        whose memory a NumPy view shows (itself for any other array): a write into a view fills that array."""
        self.report = report
        self.root_of = root_of
        self.derived: set[int] = set()
        self.keep: list[Any] = []  # holds derived arrays alive so their ids stay theirs during the call
        self.reported: set[tuple[str, str]] = set()
        self.threshold = 0  # elements; 0: the call is not judged
        self.head_dim = -1
        for pages in (key_pages, value_pages):
            self.mark(pages)
        # ids of arrays that are a whole pool: the pages themselves, and their casts, copies and views
        self.whole_pools: set[int] = set(self.derived)
        try:
            shape = shape_of(key_pages)
        except Exception:
            return
        if len(shape) != 4:
            return
        _, num_kv_heads, page_size, head_dim = shape
        try:
            if lengths_of is None:
                import numpy as np

                lens = [int(n) for n in np.array(context_lens).reshape(-1)]
            else:
                lens = lengths_of(context_lens)
        except Exception:
            return
        longer = [n for n in lens if n > page_size]
        if longer and num_kv_heads > 0 and head_dim > 0:
            self.threshold = num_kv_heads * head_dim * min(longer)
            self.head_dim = head_dim

    def mark(self, value: Any) -> None:
        if value is not None and hasattr(value, "shape"):
            self.derived.add(id(value))
            self.keep.append(value)

    def is_derived(self, value: Any) -> bool:
        if id(value) in self.derived:
            return True
        if isinstance(value, (list, tuple)):
            return any(id(item) in self.derived for item in value)
        return False

    def observe(self, op: str, inputs: tuple[Any, ...], output: Any) -> None:
        if not any(self.is_derived(value) for value in inputs):
            return
        whole_in = [value for value in inputs if id(value) in self.whole_pools]
        if op in CONTRACTION_OPS and not whole_in:
            return
        keeps_whole = op in WHOLE_ARRAY_OPS or op in ELEMENTWISE_OPS
        pool_sizes = {_size(value) for value in whole_in} if keeps_whole else set()
        outputs = output if isinstance(output, (list, tuple)) else (output,)
        for item in outputs:
            self.mark(item)
            if pool_sizes and _size(item) in pool_sizes:
                self.whole_pools.add(id(item))
            elif op not in ELEMENTWISE_OPS:
                self._judge(op, item)

    def assigned(self, op: str, target: Any, value: Any) -> None:
        """`target[index] = value`: an array written in place with something derived from the pages now holds
        it, and is judged whole (pages copied one by one into a preallocated array gather a request as surely
        as a concatenate does)."""
        if not self.is_derived(value):
            return
        whole = self.root_of(target)  # a NumPy view written into fills the array it views
        self.mark(target)
        self.mark(whole)
        if id(target) not in self.whole_pools and id(whole) not in self.whole_pools:
            self._judge(op, whole)

    def same_array(self, original: Any, view: Any) -> None:
        """`view` shows `original`'s data under another type: it is derived, and a whole pool, as it is."""
        self.mark(view)
        if id(original) in self.whole_pools:
            self.whole_pools.add(id(view))

    def _judge(self, op: str, array: Any) -> None:
        if not self.threshold:
            return
        shape = tuple(getattr(array, "shape", ()))
        if _size(array) < self.threshold or self.head_dim not in shape[-2:]:
            return
        where = caller_location(3)
        if (op, where) in self.reported or len(self.reported) >= MAX_REPORTS_PER_CALL:
            return
        self.reported.add((op, where))
        self.report({"kind": "gather_trap", "op": op, "shape": list(shape), "where": where})


def _size(value: Any) -> int:
    """Elements of an array-like (its shape's product); -1 for anything without a shape."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return -1
    size = 1
    for n in tuple(shape):
        size *= int(n)
    return size


def _point_aliases(gathering: dict[int, tuple[Any, Callable[..., Any]]]) -> None:
    """Point every other name a loaded NumPy or MLX module holds for a wrapped gathering function (by identity,
    `gathering`: id(original) -> (original, wrapper)) at its wrapper, so that
    numpy._core.multiarray.concatenate is watched as numpy.concatenate is."""
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if module_name.partition(".")[0] not in ALIAS_MODULES or not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            found = gathering.get(id(value))
            if found is not None and found[0] is value:
                namespace[name] = found[1]


class Tripwires:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.watch: GatherWatch | None = None
        # How a call's watch reads its pages and lengths (GatherWatch's shape_of, lengths_of, root_of): set by
        # install_gather_watch; the watch's own defaults until then.
        self._read_call: tuple[Callable[..., Any], ...] = ()
        self.sdpa_calls = 0
        # While the subject is imported: a call of the trap raises but is not reported. Only paged_attention's
        # source must be free of SDPA (the course's test reads that alone), and a self-test at import that
        # catches the error computes nothing with it.
        self.importing = False

    # -- SDPA ----------------------------------------------------------------------------------------------------

    def install_sdpa_trap(self, fast_module: Any) -> None:
        report = self.report
        counter = self

        def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
            if not counter.importing:
                counter.sdpa_calls += 1
                report({"kind": "sdpa_trap", "where": caller_location(1)})
            raise ForbiddenCallError(SDPA_MESSAGE)

        setattr(fast_module, SDPA_NAME, scaled_dot_product_attention)

    # -- dense gathers -------------------------------------------------------------------------------------------

    def _wrap(self, original: Callable[..., Any], op: str) -> Callable[..., Any]:
        tripwires = self

        def watched(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            watch = tripwires.watch
            if watch is not None:
                watch.observe(op, (*args, *kwargs.values()), result)
                result = tripwires._numpy_view(watch, result)
            return result

        watched.__name__ = getattr(original, "__name__", op)
        watched.__doc__ = getattr(original, "__doc__", None)
        return watched

    def _numpy_view(self, watch: GatherWatch, result: Any) -> Any:
        """A NumPy array derived from the pages comes back as a watched subclass, so that fancy indexing
        on it (which no module function sees) is observed too."""
        watched_type = getattr(self, "_watched_ndarray", None)
        if watched_type is None or type(result) is not watched_type.__base__ or id(result) not in watch.derived:
            return result
        view = result.view(watched_type)
        watch.same_array(result, view)
        return view

    def install_gather_watch(self, mx: Any, np: Any) -> None:
        # How a call's pages and lengths are read when its watch starts: with what MLX and NumPy are now, before
        # any wrapper below and before the submission loads.
        to_numpy, mx_shape, mx_array = np.array, mx.array.shape.fget, mx.array
        np_shape, np_array = np.ndarray.shape.__get__, np.ndarray

        def shape_of(array: Any) -> tuple[int, ...]:
            """The base classes' own shape, also of a subclass whose `shape` is the submission's."""
            if isinstance(array, mx_array):
                return tuple(mx_shape(array))
            return tuple(np_shape(array)) if isinstance(array, np_array) else ()

        def lengths_of(lens: Any) -> list[int]:
            return [int(n) for n in to_numpy(lens).reshape(-1).tolist()]

        np_base = np.ndarray.base.__get__

        def root_of(array: Any) -> Any:
            """The NumPy array whose memory `array` views (itself when it views none, or is no NumPy array)."""
            while isinstance(array, np_array):
                base = np_base(array)
                if not isinstance(base, np_array):
                    break
                array = base
            return array

        self._read_call = (shape_of, lengths_of, root_of)
        gathering: dict[int, tuple[Any, Callable[..., Any]]] = {}  # id(original) -> (original, its wrapper)
        for owner, prefix, names, gathers in (
            (mx, "mlx.core", (*MLX_GATHERS, *MLX_RESHAPES, *MLX_ELEMENTWISE, *MLX_CONTRACTIONS), MLX_GATHERS),
            (mx.array, "mlx.core.array", (*ARRAY_METHODS, *ARRAY_ELEMENTWISE, *ARRAY_CONTRACTIONS), ()),
            (np, "numpy", NUMPY_FUNCTIONS, (*NUMPY_GATHERS, *NUMPY_CONTRACTIONS)),
        ):
            for name in names:
                if hasattr(owner, name):
                    original = getattr(owner, name)
                    wrapper = self._wrap(original, f"{prefix}.{name}")
                    setattr(owner, name, wrapper)
                    if name in gathers:
                        gathering[id(original)] = (original, wrapper)
        _point_aliases(gathering)
        for name in ARRAY_PROPERTIES:
            getter = getattr(mx.array, name).fget
            setattr(mx.array, name, property(self._wrap(getter, f"mlx.core.array.{name}")))
        tripwires = self
        original_setitem = mx.array.__setitem__

        def __setitem__(array: Any, index: Any, value: Any) -> None:
            original_setitem(array, index, value)
            watch = tripwires.watch
            if watch is not None:
                watch.assigned("mlx.core.array.__setitem__", array, value)

        mx.array.__setitem__ = __setitem__

        class WatchedArray(np.ndarray):
            def __getitem__(self, index: Any) -> Any:
                result = super().__getitem__(index)
                watch = tripwires.watch
                if watch is not None and id(self) in watch.derived:
                    watch.observe("numpy.ndarray.__getitem__", (self,), result)
                return result

            def __setitem__(self, index: Any, value: Any) -> None:
                super().__setitem__(index, value)
                watch = tripwires.watch
                if watch is not None:
                    watch.assigned("numpy.ndarray.__setitem__", self, value)

            def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
                # Arithmetic and matmul on a page-derived NumPy array: computed on plain views (same memory,
                # `out=` included), then observed as MLX's are (elementwise, or a contraction for matmul).
                def plain(value: Any) -> Any:
                    return value.view(np.ndarray) if isinstance(value, WatchedArray) else value

                if "out" in kwargs:
                    kwargs["out"] = tuple(plain(value) for value in kwargs["out"])
                result = getattr(ufunc, method)(*(plain(value) for value in inputs), **kwargs)
                watch = tripwires.watch
                if watch is None or method != "__call__":
                    return result
                name = getattr(ufunc, "__name__", "ufunc")
                watch.observe("numpy.matmul" if name == "matmul" else "numpy.ufunc", inputs, result)
                return tripwires._numpy_view(watch, result)

        def followed(name: str, is_property: bool = False) -> Any:
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                found = getattr(super(WatchedArray, self), name)
                result = found if is_property else found(*args, **kwargs)
                watch = tripwires.watch
                if watch is not None and id(self) in watch.derived:
                    watch.observe(f"numpy.ndarray.{name}", (self, *args, *kwargs.values()), result)
                    result = tripwires._numpy_view(watch, result)
                return result

            method.__name__ = name
            return property(method) if is_property else method

        for name in (*NDARRAY_WHOLE, *NDARRAY_GATHERS):
            setattr(WatchedArray, name, followed(name))
        for name in ARRAY_PROPERTIES:
            setattr(WatchedArray, name, followed(name, is_property=True))
        self._watched_ndarray = WatchedArray

        def maker(original: Callable[..., Any]) -> Callable[..., Any]:
            def made(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                if tripwires.watch is not None and type(result) is np_array:
                    result = result.view(WatchedArray)  # not derived: only what is written into it makes it so
                return result

            made.__name__ = getattr(original, "__name__", "maker")
            made.__doc__ = getattr(original, "__doc__", None)
            return made

        def assigner(original: Callable[..., Any], op: str) -> Callable[..., Any]:
            def assign(target: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(target, value, *args, **kwargs)
                watch = tripwires.watch
                if watch is not None:
                    watch.assigned(op, target, value)
                return result

            assign.__name__ = getattr(original, "__name__", op)
            assign.__doc__ = getattr(original, "__doc__", None)
            return assign

        for name in NUMPY_MAKERS:
            if hasattr(np, name):
                setattr(np, name, maker(getattr(np, name)))
        for name in NUMPY_ASSIGNS:
            if hasattr(np, name):
                setattr(np, name, assigner(getattr(np, name), f"numpy.{name}"))

    def begin_call(self, key_pages: Any, value_pages: Any, context_lens: Any) -> None:
        self.watch = GatherWatch(key_pages, value_pages, context_lens, self.report, *self._read_call)

    def end_call(self) -> None:
        self.watch = None
