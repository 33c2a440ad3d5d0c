"""A crashed invariants suite is reported as a crash: its own exit code, the cause from the log, no empty tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagecheck.cli import build_parser, main
from pagecheck.exit_codes import ExitCode, describe_exit_codes, most_serious
from pagecheck.reports.suite_crash import CAUSE_LINES, crash_cause, crash_kind
from pagecheck.reports.schema_check import schema_errors

ROOT = Path(__file__).resolve().parent.parent
SEGFAULT = ROOT / "tests" / "subjects" / "segfaults.py"
# Imports in the report's own process, raises when the suite's pytest process imports it (its command line
# writes a results file).
RAISES_INSIDE_THE_SUITE = '''import sys

from pagecheck.impl.attention import paged_attention  # noqa: F401
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache, TinyKvPagedPool  # noqa: F401

if any(arg.startswith("--pagecheck-results") for arg in sys.argv):
    raise RuntimeError("planted: this subject cannot be imported inside the suite")
'''


def report(subject: str, out: Path, *extra: str) -> tuple[int, dict, str, str]:
    code = main(["report", "--quick", "--subject", subject, "--skip", "tolerance", "--skip", "bench",
                 "--invariant", "context_len", "--out", str(out), *extra])  # fmt: skip
    document = json.loads((out / "conformance.json").read_text())
    return code, document, (out / "index.md").read_text(), (out / "conformance.md").read_text()


def assert_no_empty_report(index: str, conformance: str) -> None:
    for page in (index, conformance):
        assert "0 of 0" not in page
        assert "| invariant" not in page  # no table header over no rows
        assert "None" not in page


def test_a_subject_that_raises_at_import_inside_the_suite_is_a_crash(tmp_path: Path) -> None:
    subject = tmp_path / "raises_inside.py"
    subject.write_text(RAISES_INSIDE_THE_SUITE)
    code, document, index, conformance = report(str(subject), tmp_path / "out", "--jobs", "2")
    assert code == ExitCode.SUITE_CRASHED
    assert schema_errors("conformance", document) == []
    assert document["verdict"] == "crash"
    crash = document["suite"]["crash"]
    assert "usage error" in crash["what"]
    assert "planted: this subject cannot be imported inside the suite" in crash["cause"]
    assert document["suite"]["hypothesis_profile"] == "default"
    assert index.split("\n## ")[1].startswith("Start here: the invariants suite crashed")
    assert "planted: this subject cannot be imported" in index and "**Verdict: CRASH**" in index
    assert crash["command"] and str(subject) in crash["command"]
    assert_no_empty_report(index, conformance)


def test_a_segfault_under_a_check_is_a_crash_with_the_faulting_frame(tmp_path: Path) -> None:
    code, document, index, conformance = report(str(SEGFAULT), tmp_path, "--jobs", "0")
    assert code == ExitCode.SUITE_CRASHED
    assert schema_errors("conformance", document) == []
    crash = document["suite"]["crash"]
    assert "SIGSEGV" in crash["what"]
    assert crash["cause"].startswith("Fatal Python error: Segmentation fault")
    assert "segfaults.py" in crash["cause"] and "in paged_attention" in crash["cause"]
    assert "segfaults.py" in index
    assert_no_empty_report(index, conformance)


def test_the_crash_exit_code_is_distinct_documented_and_ranked() -> None:
    assert len({int(code) for code in ExitCode}) == len(ExitCode)
    assert f"  {int(ExitCode.SUITE_CRASHED)}  SUITE_CRASHED:" in describe_exit_codes()
    help_text = build_parser()._subparsers._group_actions[0].choices["report"].format_help()  # noqa: SLF001
    assert "SUITE_CRASHED" in help_text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"{int(ExitCode.SUITE_CRASHED)} the invariants suite crashed" in readme
    assert most_serious([ExitCode.INVARIANT_FAILED, ExitCode.SUITE_CRASHED, ExitCode.SUITE_ERROR]) == ExitCode.SUITE_CRASHED


FAULT_LOG = """$ python -m pytest invariants
....
Fatal Python error: Segmentation fault

Thread 0x00007f (most recent call first):
  File "/x/execnet/gateway_base.py", line 534 in read

Current thread 0x00007e (most recent call first):
  File "/home/student/attention.py", line 9 in paged_attention
  File "/x/invariants/calls.py", line 24 in attention_output
"""
TRACEBACK_LOG = """....F
Traceback (most recent call last):
  File "/x/a.py", line 1, in <module>
    import b
  File "/x/b.py", line 2, in <module>
    raise KeyError("first")
KeyError: 'first'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/conftest.py", line 3, in pytest_configure
    load()
RuntimeError: the one that stopped it
some trailing line
"""


@pytest.mark.parametrize("log", [FAULT_LOG, FAULT_LOG.replace("....\nFatal", "....Fatal")], ids=["own_line", "after_progress_dots"])
def test_the_cause_is_the_crashing_thread_of_a_fault_dump(log: str) -> None:
    cause = crash_cause(log)
    assert cause.splitlines()[0] == "Fatal Python error: Segmentation fault"
    assert cause.splitlines()[1].startswith("Current thread")
    assert "attention.py" in cause and "execnet" not in cause and "$ python" not in cause


def test_the_cause_is_the_last_traceback_ending_with_its_exception() -> None:
    cause = crash_cause(TRACEBACK_LOG)
    assert cause.splitlines()[0] == "Traceback (most recent call last):"
    assert cause.splitlines()[-1] == "RuntimeError: the one that stopped it"
    assert "KeyError" not in cause


def test_without_a_traceback_the_cause_is_the_error_lines_or_the_end() -> None:
    assert crash_cause("collecting\nERROR: subject spec='x.py': importing failed\n\n") == "ERROR: subject spec='x.py': importing failed"
    tail = crash_cause("\n".join(f"line {i}" for i in range(100)))
    assert tail.splitlines() == [f"line {i}" for i in range(100 - CAUSE_LINES, 100)]


@pytest.mark.parametrize(
    ("returncode", "results", "crashed"),
    [
        (-11, {"checks": []}, True),
        (4, None, True),
        (1, None, True),
        (1, {"checks": [{"nodeid": "n", "outcome": "fail", "message": "worker 'gw0' crashed while running 'n'"}]}, True),
        (1, {"checks": [{"nodeid": "n", "outcome": "fail", "message": "[context_len] off by one"}]}, False),
        (0, {"checks": []}, False),
        (5, {"checks": []}, False),  # nothing collected: a suite error, not a crash
    ],
)
def test_what_counts_as_a_crash(returncode: int, results: dict | None, crashed: bool) -> None:
    assert (crash_kind(returncode, results) is not None) == crashed
