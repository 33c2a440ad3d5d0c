"""impl.paged_attention on seeded random malformed calls: nothing crashes the process, and nothing the
input contract rejects gets through.

Each call mixes valid and broken parts (shapes with zero extents, H_q not a multiple of H_kv, dtypes
that differ or that the kernels do not take, strided and reversed arrays, block tables with ids past
the pool or aliased, -1 in live columns, contexts past the table, page sizes zero, negative, None or
fractional, non-finite scales, unknown masks). The calls run in a child process, so a crash fails
this test instead of ending the test run.

The contract is reference/validation.py's check_paged_inputs. Where it rejects a call, the subject
must raise the same exception type (ValueError; NotImplementedError for a mask other than None or
"causal"). Where it accepts one, the subject returns an array of the query's shape or raises
ValueError for what it alone refuses (a dtype or head dim its kernels lack, a scale that is not
finite).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CASES = 400

CHILD = textwrap.dedent(
    """
    import json, math, random, sys
    import mlx.core as mx
    import numpy as np
    from pagecheck.impl.attention import paged_attention
    from pagecheck.reference.validation import check_paged_inputs

    rng = random.Random(int(sys.argv[1]))
    np_rng = np.random.default_rng(int(sys.argv[1]))
    FLOATS = [mx.float32, mx.float16, mx.bfloat16]

    def pick(*values):
        return rng.choice(values)

    def normal(shape, dtype):
        return mx.array(np_rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    def valid_call():
        \"\"\"A call the contract accepts: distinct live pages, -1 past each context, contexts 0 or >= L.\"\"\"
        kv_heads, group = pick(1, 2), pick(1, 2, 4)
        batch, length, dim, page = pick(1, 2, 3), pick(1, 2, 5), pick(8, 16, 64), pick(1, 2, 4, 16)
        lens = [pick(0, length, length + rng.randint(0, 40)) for _ in range(batch)]
        live = [-(-n // page) for n in lens]
        width = max(live) + pick(0, 1, 2)
        pages = sum(live) + pick(0, 1, 5)
        ids = np_rng.permutation(pages)
        table, used = np.full((batch, max(width, 1)), -1), 0
        for b, count in enumerate(live):
            table[b, :count] = ids[used : used + count]
            used += count
        dtype = pick(*FLOATS)
        return dict(query=normal((batch, kv_heads * group, length, dim), dtype),
                    key_pages=normal((pages, kv_heads, page, dim), dtype),
                    value_pages=normal((pages, kv_heads, page, dim), dtype),
                    block_table=mx.array(table.astype(np.int32)), context_lens=mx.array(np.array(lens, np.int32)),
                    page_size=page, scale=None, mask=pick(None, "causal"), page=page, kv_heads=kv_heads)

    # Edits of one entry leave an empty table or batch as it is.
    def with_table(call, edit):
        table = np.array(call["block_table"])
        if table.size:
            edit(table, np.array(call["context_lens"]))
        call["block_table"] = mx.array(table)

    def with_lens(call, edit):
        lens = np.array(call["context_lens"])
        if lens.size:
            edit(lens, np.array(call["block_table"]))
        call["context_lens"] = mx.array(lens)

    def first_live(table):
        rows, cols = np.nonzero(table >= 0)
        return (int(rows[0]), int(cols[0])) if rows.size else None

    def alias(table, lens):
        spots = list(zip(*np.nonzero(table >= 0)))
        if len(spots) >= 2:
            (r0, c0), (r1, c1) = spots[0], spots[-1]
            table[r1, c1] = table[r0, c0]

    def set_live(table, value):
        spot = first_live(table)
        if spot is not None:
            table[spot] = value

    MUTATIONS = {
        "page id past the pool": lambda c: with_table(c, lambda t, l: set_live(t, 10**6)),
        "page id -2": lambda c: with_table(c, lambda t, l: set_live(t, -2)),
        "-1 in a live column": lambda c: with_table(c, lambda t, l: set_live(t, -1)),
        "page id in the padding": lambda c: with_table(c, lambda t, l: t.__setitem__((0, t.shape[1] - 1), 0)),
        "aliased page": lambda c: with_table(c, alias),
        "context past the table": lambda c: with_lens(c, lambda l, t: l.__setitem__(0, t.shape[1] * c["page"] + 1)),
        "negative context": lambda c: with_lens(c, lambda l, t: l.__setitem__(0, -1)),
        "context shorter than L": lambda c: with_lens(c, lambda l, t: l.__setitem__(0, c["query"].shape[2] - 1)),
        "huge context": lambda c: with_lens(c, lambda l, t: l.__setitem__(0, 2**31 - 1)),
        "int64 metadata": lambda c: c.update(block_table=c["block_table"].astype(mx.int64),
                                             context_lens=c["context_lens"].astype(mx.int64)),
        "float table": lambda c: c.update(block_table=c["block_table"].astype(mx.float32)),
        "transposed table": lambda c: c.update(block_table=mx.swapaxes(c["block_table"], 0, 1)),
        "reversed rows": lambda c: c.update(block_table=c["block_table"][::-1], context_lens=c["context_lens"][::-1]),
        "strided pool": lambda c: c.update(key_pages=mx.swapaxes(mx.swapaxes(c["key_pages"], 2, 3), 2, 3)[::1]),
        "values' dtype differs": lambda c: c.update(value_pages=c["value_pages"].astype(
            mx.float16 if c["value_pages"].dtype != mx.float16 else mx.float32)),
        "int32 arrays": lambda c: c.update(query=c["query"].astype(mx.int32), key_pages=c["key_pages"].astype(mx.int32),
                                           value_pages=c["value_pages"].astype(mx.int32)),
        "H_q not a multiple": lambda c: c.update(query=mx.concatenate([c["query"], c["query"][:, :1]], axis=1)
                                                  if c["kv_heads"] > 1 else c["query"][:, :0]),
        "head dim differs": lambda c: c.update(query=c["query"][..., :-1]),
        "odd head dim everywhere": lambda c: c.update(query=c["query"][..., :7], key_pages=c["key_pages"][..., :7],
                                                      value_pages=c["value_pages"][..., :7]),
        "empty batch": lambda c: c.update(query=c["query"][:0], block_table=c["block_table"][:0],
                                          context_lens=c["context_lens"][:0]),
        "empty pool": lambda c: c.update(key_pages=c["key_pages"][:0], value_pages=c["value_pages"][:0]),
        "3-d query": lambda c: c.update(query=c["query"][:, :, 0]),
        "page size differs": lambda c: c.update(page_size=c["page"] + 1),
        "page size 0": lambda c: c.update(page_size=0),
        "page size None": lambda c: c.update(page_size=None),
        "page size 4.0": lambda c: c.update(page_size=float(c["page"])),
        "page size numpy": lambda c: c.update(page_size=np.int64(c["page"])),
        "scale nan": lambda c: c.update(scale=math.nan),
        "scale inf": lambda c: c.update(scale=math.inf),
        "scale negative": lambda c: c.update(scale=-0.5),
        "mask none": lambda c: c.update(mask="none"),
        "mask Causal": lambda c: c.update(mask="Causal"),
        "key pages None": lambda c: c.update(key_pages=None),
    }

    def outcome(run):
        try:
            return "ok", run()
        except ValueError:
            return "ValueError", None
        except NotImplementedError:
            return "NotImplementedError", None

    violations, tally, reached = [], {}, set()
    for case in range(int(sys.argv[2])):
        call = valid_call()
        # A pool set to None goes last: the other mutations read the arrays.
        names = sorted(rng.sample(sorted(MUTATIONS), pick(0, 1, 1, 2)), key=lambda name: name == "key pages None")
        for name in names:
            MUTATIONS[name](call)
        reached.update(names)
        args = [call[k] for k in ("query", "key_pages", "value_pages", "block_table", "context_lens", "page_size")]
        expected, _ = outcome(lambda: check_paged_inputs(*args, call["mask"]))
        got, out = outcome(lambda: paged_attention(*args, scale=call["scale"], mask=call["mask"]))
        if got == "ok":
            mx.eval(out)
            if tuple(out.shape) != tuple(call["query"].shape):
                violations.append(f"case {case} {names}: output shape {tuple(out.shape)}")
        tally[f"{expected}->{got}"] = tally.get(f"{expected}->{got}", 0) + 1
        if expected != "ok" and got != expected:
            violations.append(f"case {case} {names}: the contract says {expected}, the subject {got}")
        if expected == "ok" and got == "NotImplementedError":
            violations.append(f"case {case} {names}: the contract accepts, the subject raised NotImplementedError")
    print(json.dumps({"violations": violations, "tally": tally, "unreached": sorted(set(MUTATIONS) - reached)}))
    """
)


def run_child(seed: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(seed), str(CASES)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, f"the child process ended with {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_malformed_calls_neither_crash_nor_pass_the_contract() -> None:
    report = run_child(seed=20261204)
    assert report["violations"] == [], report
    # The draw applies every mutation and reaches every outcome the contract distinguishes: accepted and
    # computed, accepted and refused by the subject alone, rejected, and an unsupported mask.
    assert report["unreached"] == []
    tally = report["tally"]
    assert tally.get("ok->ok", 0) >= 50 and tally.get("ValueError->ValueError", 0) >= 100
    assert tally.get("NotImplementedError->NotImplementedError", 0) >= 5 and tally.get("ok->ValueError", 0) >= 5


def test_a_scale_that_is_not_a_finite_real_number_is_a_value_error_naming_it() -> None:
    """A string crossed into the binding as a multi-line TypeError; 1e300 was reported as 'scale = inf'."""
    import mlx.core as mx
    import numpy as np
    import pytest

    from pagecheck.impl.attention import paged_attention

    query, pages = mx.ones((1, 4, 1, 8)), mx.ones((2, 2, 4, 8))
    table, lens = mx.array([[0, 1]], dtype=mx.int32), mx.array([5], dtype=mx.int32)
    for scale, message in (("abc", "scale='abc' must be a real number"), (True, "scale=True must be a real number"),
                           (1e300, r"scale=1e\+300 must be a finite number that float32 holds"),
                           (float("nan"), "scale=nan must be a finite"), (mx.ones((2,)), "must be a real number")):
        with pytest.raises(ValueError, match=message):
            paged_attention(query, pages, pages, table, lens, 4, scale=scale)
    for scale in (2, np.float64(0.3), mx.array(0.5)):
        assert paged_attention(query, pages, pages, table, lens, 4, scale=scale).shape == (1, 4, 1, 8)
