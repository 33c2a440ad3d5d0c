"""The gather tripwire's judgement on real arrays: a request's pages gathered into one array is reported, a whole
pool cast, converted or reshaped is not (it stands for the pool, and what is gathered from it is judged)."""

from __future__ import annotations

import json
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.grading.tripwires import GatherWatch

NUM_PAGES, KV_HEADS, PAGE, DIM = 6, 2, 4, 8
CONTEXT = 9  # three pages: the threshold is KV_HEADS * DIM * CONTEXT elements


@pytest.fixture
def watch():
    reports: list[dict] = []
    key_pages = mx.arange(NUM_PAGES * KV_HEADS * PAGE * DIM, dtype=mx.float32).reshape(NUM_PAGES, KV_HEADS, PAGE, DIM)
    value_pages = key_pages + 1
    made = GatherWatch(key_pages, value_pages, mx.array([CONTEXT, 0]), reports.append)
    return made, key_pages, reports


def run(watch: GatherWatch, op: str, fn, *inputs):
    output = fn(*inputs)
    watch.observe(op, inputs, output)
    return output


def test_a_request_gathered_with_take_is_reported(watch) -> None:
    made, key_pages, reports = watch
    run(made, "mlx.core.take", lambda pages, ids: mx.take(pages, ids, axis=0), key_pages, mx.array([4, 0, 2]))
    assert [report["kind"] for report in reports] == ["gather_trap"]


def test_one_page_at_a_time_is_not_reported(watch) -> None:
    made, key_pages, reports = watch
    for page in (4, 0, 2):
        run(made, "mlx.core.array.__getitem__", lambda pages, p=page: pages[p], key_pages)
    assert reports == []


REQUEST = [4, 0, 2]  # the request's pages
ROWS = [page * KV_HEADS * PAGE + row for page in REQUEST for row in range(KV_HEADS * PAGE)]


@pytest.mark.parametrize(
    ("op", "whole", "gather_op", "gather"),
    [
        ("mlx.core.array.astype", lambda pages: pages.astype(mx.float16),
         "mlx.core.take", lambda pool: mx.take(pool, mx.array(REQUEST), axis=0)),
        ("mlx.core.reshape", lambda pages: mx.reshape(pages, (-1, DIM)),
         "mlx.core.take", lambda pool: mx.take(pool, mx.array(ROWS), axis=0)),
        ("mlx.core.array.transpose", lambda pages: pages.transpose(1, 0, 2, 3),
         "mlx.core.take", lambda pool: mx.take(pool, mx.array(REQUEST), axis=1)),
        ("numpy.asarray", lambda pages: np.asarray(pages),
         "numpy.take", lambda pool: np.take(pool, np.array(REQUEST), axis=0)),
    ],
    ids=["astype", "reshape", "transpose", "to numpy"],
)
def test_a_whole_pool_cast_or_converted_is_not_a_gather_but_a_gather_from_it_is(
    watch, op, whole, gather_op, gather
) -> None:
    made, key_pages, reports = watch
    pool = run(made, op, whole, key_pages)
    assert reports == []
    run(made, gather_op, gather, pool)
    assert [report["kind"] for report in reports] == ["gather_trap"]


def test_a_reshape_that_is_not_the_whole_pool_is_judged(watch) -> None:
    made, key_pages, reports = watch
    gathered = key_pages[mx.array([4, 0, 2])]  # not observed: stands for an unwatched route
    made.mark(gathered)
    run(made, "mlx.core.reshape", lambda g: g.swapaxes(0, 1).reshape(KV_HEADS, -1, DIM), gathered)
    assert [report["kind"] for report in reports] == ["gather_trap"]


def test_joining_both_pools_is_a_gather(watch) -> None:
    made, key_pages, reports = watch
    run(made, "mlx.core.concatenate", lambda k: mx.concatenate([k, k]), key_pages)
    assert [report["kind"] for report in reports] == ["gather_trap"]


@pytest.mark.parametrize(
    ("op", "copy"),
    [("mlx.core.array.__add__", lambda pages: pages + 0), ("mlx.core.multiply", lambda pages: mx.multiply(pages, 1))],
    ids=["+ 0", "multiply by 1"],
)
def test_an_arithmetic_copy_of_the_pool_is_followed_into_a_gather(watch, op, copy) -> None:
    made, key_pages, reports = watch
    pool = run(made, op, copy, key_pages)
    assert reports == []
    run(made, "mlx.core.take", lambda p: mx.take(p, mx.array(REQUEST), axis=0), pool)
    assert [report["kind"] for report in reports] == ["gather_trap"]


def test_a_one_hot_product_with_the_pool_is_a_gather(watch) -> None:
    made, key_pages, reports = watch
    flat = run(made, "mlx.core.reshape", lambda p: p.reshape(NUM_PAGES, -1), key_pages)
    one_hot = mx.zeros((len(REQUEST), NUM_PAGES)).at[mx.arange(len(REQUEST)), mx.array(REQUEST)].add(1.0)
    picked = run(made, "mlx.core.matmul", mx.matmul, one_hot, flat)
    run(made, "mlx.core.reshape", lambda p: p.reshape(-1, KV_HEADS, PAGE, DIM), picked)
    assert reports and {report["kind"] for report in reports} == {"gather_trap"}


def test_a_page_walk_with_arithmetic_and_products_is_not_reported(watch) -> None:
    """The honest loop, op by op: one page's slice, scaled, multiplied by the queries; nothing is judged big."""
    made, key_pages, reports = watch
    queries = mx.ones((KV_HEADS, 8, DIM))  # as many query rows as D: the scores' last two dims can include D
    for page in REQUEST:
        keys = run(made, "mlx.core.array.__getitem__", lambda p, i=page: p[i], key_pages)
        keys = run(made, "mlx.core.array.astype", lambda k: k.astype(mx.float32), keys)
        scaled = run(made, "mlx.core.array.__mul__", lambda k: k * 0.5, keys)
        scores = run(made, "mlx.core.array.__matmul__", lambda q, k: q @ k.swapaxes(-1, -2), queries, scaled)
        run(made, "mlx.core.array.__matmul__", lambda s, k: s @ k, scores, scaled)
    assert reports == []


# The start of every script run in a fresh interpreter: the watch installed, a pool of 6 pages and a request
# of 3 of them (context 9), its reports collected in `reports`.
INSTALLED_PRELUDE = r"""
import json, sys
import mlx.core as mx
import numpy as np
from pagecheck.grading.tripwires import Tripwires

reports = []
tripwires = Tripwires(reports.append)
tripwires.install_gather_watch(mx, np)
pages, heads, page, dim, context = 6, 2, 4, 8, 9
key_pages = mx.array(np.random.default_rng(0).normal(size=(pages, heads, page, dim)).astype(np.float32))
request = [4, 0, 2]
"""

INSTALLED_SCRIPT = INSTALLED_PRELUDE + r"""
value_pages = key_pages * 2
query = np.ones((heads, 3, dim), dtype=np.float32)


def numpy_page_walk(key_pages, value_pages):
    # the honest NumPy route: the pools converted whole, then one page at a time, in-place updates included
    keys_np, values_np = np.asarray(key_pages), np.asarray(value_pages)
    total = np.zeros((heads, 3, dim), dtype=np.float32)
    for position, page_id in enumerate(request):
        used = min(page, context - position * page)
        keys = keys_np[page_id][:, :used]
        keys *= 1.0
        scores = np.exp(query @ np.swapaxes(keys, -1, -2) * 0.5)
        total += scores @ values_np[page_id][:, :used]
    return total


results = {}
tripwires.begin_call(key_pages, value_pages, mx.array([context, 0]))
walked = numpy_page_walk(key_pages, value_pages)
tripwires.end_call()
results["walk"] = [r["kind"] for r in reports]
plain = np.asarray(key_pages).copy().view(np.ndarray)
reference = np.zeros_like(walked)
for position, page_id in enumerate(request):
    used = min(page, context - position * page)
    keys = plain[page_id][:, :used]
    reference += np.exp(query @ np.swapaxes(keys, -1, -2) * 0.5) @ (plain[page_id][:, :used] * 2)
results["walk_matches"] = bool(np.allclose(walked, reference))
reports.clear()
tripwires.begin_call(key_pages, value_pages, mx.array([context, 0]))
copy = np.asarray(key_pages) + 0.0
gathered = copy[np.array(request)]
tripwires.end_call()
results["copy_then_gather"] = [r["kind"] for r in reports]
reports.clear()
import numpy._core.multiarray as multiarray  # the same function as np.concatenate, under another module's name
tripwires.begin_call(key_pages, value_pages, mx.array([context, 0]))
converted = np.asarray(key_pages)
multiarray.concatenate([converted[p] for p in request], axis=1)
mx.concat([key_pages[p] for p in request], axis=1)  # MLX's other name for concatenate
tripwires.end_call()
results["aliases"] = [r["op"] for r in reports]
print(json.dumps(results))
"""


def run_installed(script: str) -> dict:
    """Run `script` in a fresh interpreter (the watch patches MLX and NumPy for good) and read the JSON it prints
    last."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_installed_watch_follows_numpy_arithmetic_and_aliases_and_lets_a_numpy_page_walk_be() -> None:
    results = run_installed(INSTALLED_SCRIPT)
    assert results == {"walk": [], "walk_matches": True, "copy_then_gather": ["gather_trap"],
                       "aliases": ["numpy.concatenate", "mlx.core.concat"]}  # fmt: skip


SETITEM_SCRIPT = INSTALLED_PRELUDE + r"""
results = {}

tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
dense = mx.zeros((heads, len(request) * page, dim))
for position, page_id in enumerate(request):
    dense[:, position * page : (position + 1) * page] = key_pages[page_id]
tripwires.end_call()
results["preallocated"] = [r["op"] for r in reports]
results["copied"] = bool(mx.array_equal(dense, mx.concatenate([key_pages[p] for p in request], axis=1)).item())

reports.clear()
tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
out = mx.zeros((heads, 3, dim))  # an honest walk: one page's slice in a page-sized buffer, results into the output
query = mx.ones((heads, 3, dim))
for position, page_id in enumerate(request):
    buffer = mx.zeros((heads, page, dim))
    buffer[:, :] = key_pages[page_id]
    out[:, :] = out + mx.softmax(query @ buffer.swapaxes(-1, -2), axis=-1) @ buffer
tripwires.end_call()
results["walk"] = [r["op"] for r in reports]

# The functional forms of the same writes: slice_update and put_along_axis return the filled array.
for name in ("slice_update", "put_along_axis"):
    reports.clear()
    tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
    dense = mx.zeros((heads, len(request) * page, dim))
    for position, page_id in enumerate(request):
        if name == "slice_update":
            dense = mx.slice_update(dense, key_pages[page_id], mx.array([0, position * page, 0]), axes=(0, 1, 2))
        else:
            rows = mx.broadcast_to(mx.arange(position * page, (position + 1) * page)[None, :, None], (heads, page, dim))
            dense = mx.put_along_axis(dense, rows, key_pages[page_id], axis=1)
    tripwires.end_call()
    results[name] = sorted({r["op"] for r in reports})
    results[name + "_copied"] = bool(mx.array_equal(dense, mx.concatenate([key_pages[p] for p in request], axis=1)).item())
print(json.dumps(results))
"""


def test_installed_watch_judges_an_array_filled_with_pages_in_place() -> None:
    """In place or functional (slice_update, put_along_axis: a helper's submission gathered with slice_update
    unseen), pages written into a preallocated array are a gather; a page-sized buffer is not."""
    results = run_installed(SETITEM_SCRIPT)
    assert results == {
        "preallocated": ["mlx.core.array.__setitem__"], "copied": True, "walk": [],
        "slice_update": ["mlx.core.slice_update"], "slice_update_copied": True,
        "put_along_axis": ["mlx.core.put_along_axis"], "put_along_axis_copied": True,
    }


NUMPY_BUFFER_SCRIPT = INSTALLED_PRELUDE + r"""
results = {}
expected = np.concatenate([np.asarray(key_pages)[p] for p in request], axis=1)

def judged(name, gather):
    reports.clear()
    tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
    gathered = gather()
    tripwires.end_call()
    results[name] = sorted({r["op"] for r in reports})
    results[name + "_copied"] = bool(np.array_equal(np.asarray(gathered), expected))

def filled(make, write):
    pool = np.asarray(key_pages)
    dense = make((heads, len(request) * page, dim), np.float32)
    for position, page_id in enumerate(request):
        write(dense, position, pool[page_id])
    return dense

def into_slice(dense, position, one_page):
    dense[:, position * page : (position + 1) * page] = one_page

def into_view(dense, position, one_page):
    view = dense[:, position * page : (position + 1) * page]
    view[...] = one_page

def with_copyto(dense, position, one_page):
    np.copyto(dense[:, position * page : (position + 1) * page], one_page)

judged("zeros", lambda: filled(np.zeros, into_slice))
judged("empty_view", lambda: filled(np.empty, into_view))
judged("copyto", lambda: filled(np.zeros, with_copyto))
judged("copyto_plain", lambda: filled(lambda *a: np.zeros(*a).view(np.ndarray), with_copyto))

# The honest NumPy walk: one page at a time into a page-sized buffer, results into a preallocated output.
reports.clear()
tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
pool = np.asarray(key_pages)
out = np.zeros((heads, 3, dim), dtype=np.float32)
query = np.ones((heads, 3, dim), dtype=np.float32)
for page_id in request:
    buffer = np.empty((heads, page, dim), dtype=np.float32)
    buffer[...] = pool[page_id]
    out[...] = out + np.exp(query @ buffer.swapaxes(-1, -2) * 0.1) @ buffer
tripwires.end_call()
results["walk"] = [r["op"] for r in reports]
# Outside a call the makers give plain arrays.
results["outside"] = type(np.zeros(2)).__name__
print(json.dumps(results))
"""


def test_installed_watch_judges_a_numpy_buffer_filled_with_pages() -> None:
    """Pages written one by one into a NumPy array the call made (np.zeros, np.empty; by slice, through a view,
    with np.copyto) are a gather, as into an MLX one: a plain NumPy buffer's __setitem__ reached no wrapper, and a
    dense gather written so went unreported (course_conformant's attention gathering each request into np.zeros
    graded 80/80 and 90/90 beyond the course with no finding; now 0/90 beyond, gather_trap). A page-sized buffer
    is still the page walk."""
    results = run_installed(NUMPY_BUFFER_SCRIPT)
    assert results == {
        "zeros": ["numpy.ndarray.__setitem__"], "zeros_copied": True,
        "empty_view": ["numpy.ndarray.__setitem__"], "empty_view_copied": True,
        "copyto": ["numpy.copyto"], "copyto_copied": True,
        "copyto_plain": ["numpy.copyto"], "copyto_plain_copied": True,
        "walk": [], "outside": "ndarray",
    }


CONTRACTION_SCRIPT = INSTALLED_PRELUDE + r"""
results = {}
one_hot = np.zeros((len(request), pages), dtype=np.float32)
one_hot[np.arange(len(request)), request] = 1.0

def judged(gather):
    reports.clear()
    tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
    gathered = gather()
    tripwires.end_call()
    return [r["op"] for r in reports][:1], gathered

# A one-hot product with the whole pool picks the request's pages, whichever NumPy contraction computes it.
pool = lambda: np.asarray(key_pages)
for name, gather in (
    ("dot", lambda: np.dot(one_hot, pool().reshape(pages, -1)).reshape(-1, heads, page, dim)),
    ("einsum", lambda: np.einsum("rp,phsd->rhsd", one_hot, pool())),
    ("tensordot", lambda: np.tensordot(one_hot, pool(), axes=1)),
):
    results[name], gathered = judged(gather)
    results[name + "_picked"] = bool(np.array_equal(gathered, np.asarray(key_pages)[request]))
# .T shows the whole pool reversed; the pages taken from it along its page axis, turned back, are a gather.
results["mx_T"], _ = judged(lambda: mx.take(key_pages.T, mx.array(request), axis=3).T)
results["np_T"], _ = judged(lambda: np.asarray(key_pages).T[..., request].T)
# NumPy array methods are followed as NumPy's functions are.
results["method_take"], _ = judged(lambda: np.asarray(key_pages).astype(np.float64).take(request, axis=0))
# The honest NumPy walk with einsum and .T, one page at a time: nothing to report.
def walk():
    query = np.ones((heads, 3, dim), dtype=np.float32)
    keys_np = np.asarray(key_pages)
    out = np.zeros((heads, 3, page), dtype=np.float32)
    for page_id in request:
        out += np.einsum("hqd,hdp->hqp", query, keys_np[page_id].transpose(0, 2, 1))
        out += np.dot(query[0], keys_np[page_id][0].T)
    return out
results["walk"], _ = judged(walk)
print(json.dumps(results))
"""


def test_installed_watch_judges_numpy_contractions_and_follows_T_and_array_methods() -> None:
    results = run_installed(CONTRACTION_SCRIPT)
    # np.dot's product is flat (no head dimension last) and is judged where it is reshaped back.
    assert results == {
        "dot": ["numpy.ndarray.reshape"], "dot_picked": True, "einsum": ["numpy.einsum"], "einsum_picked": True,
        "tensordot": ["numpy.tensordot"], "tensordot_picked": True, "mx_T": ["mlx.core.array.T"],
        "np_T": ["numpy.ndarray.T"], "method_take": ["numpy.ndarray.take"], "walk": [],
    }  # fmt: skip


REBOUND_SCRIPT = INSTALLED_PRELUDE + r"""
results = {}
# A submission rebinds, after the watch is installed, what a watch's start would read the call's lengths with:
# numpy.array raising (a red-team submission switched the watch off so, for every call).
def refusing(*args, **kwargs):
    raise RuntimeError("no")

np.array = refusing
tripwires.begin_call(key_pages, key_pages, mx.array([context, 0]))
mx.concatenate([key_pages[p] for p in request], axis=1)
tripwires.end_call()
results["rebound"] = [r["kind"] for r in reports]
print(json.dumps(results))
"""


def test_installed_watch_reads_each_call_with_what_it_took_before_the_submission_loaded() -> None:
    assert run_installed(REBOUND_SCRIPT) == {"rebound": ["gather_trap"]}
