"""`pagecheck bench --subject`: the subject is timed beside impl and the baselines, with spread and a correctness mark.

A correct file subject is timed and marked ok; a mutant is timed too, and
marked WRONG. --compare ratios and flags come from the two runs' spreads.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from pagecheck.bench.attention import process_spread
from pagecheck.bench.compare import MIN_PROCESSES, change_of, compare_runs
from pagecheck.cli import main
from pagecheck.exit_codes import ExitCode
from pagecheck.reports.schema_check import schema_errors

ROOT = Path(__file__).resolve().parent.parent
MUTANT = ROOT / "tests" / "mutants" / "context_minus_one.py"
SVG = "{http://www.w3.org/2000/svg}"
CONTEXTS = "16,64"
REPEATS = 3
CORRECT_SUBJECT = '''"""A student-style subject: this project's implementation under a file of its own."""
from pagecheck.impl.attention import paged_attention  # noqa: F401
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
'''


def bench(out: Path, subject: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["bench", "--quick", "--subject", subject, "--contexts", CONTEXTS, "--out", str(out), *extra])
    return code, json.loads((out / "bench.json").read_text())


@pytest.fixture(scope="module")
def correct_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("correct")
    subject = folder / "student_attention.py"
    subject.write_text(CORRECT_SUBJECT)
    code, document = bench(folder / "run", str(subject), "--repeats", str(REPEATS))
    return folder / "run", code, document


def test_a_correct_subject_is_timed_with_spread_beside_impl_and_marked_ok(
    correct_run: tuple[Path, int, dict[str, Any]],
) -> None:
    out, code, document = correct_run
    assert code == ExitCode.OK, document["problems"]
    assert schema_errors("bench", document) == []
    assert document["configuration"]["variants"] == ["subject", "impl", "dense_gather", "mlx_sdpa"]
    assert Path(document["configuration"]["subject"]).is_absolute()
    assert document["subject_correct"] and document["correct"]
    for variant in document["configuration"]["variants"]:
        for context in CONTEXTS.split(","):
            spread = document["spread_us"][variant][context]
            assert spread["processes"] == REPEATS
            assert spread["min"] <= spread["q1"] <= spread["median"] <= spread["q3"] <= spread["max"]
            assert spread["median"] == document["medians_us"][variant][context]
            check = document["correctness"][variant][context]
            assert check["passed"] and check["allowance_used"] <= 1
    page = (out / "bench.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("|")]
    assert "student_attention.py" in page and "µs, ok" in page
    assert not any("WRONG" in row for row in rows)
    index = (out / "index.md").read_text()
    headers = [[cell.strip() for cell in line.split("|")] for line in index.splitlines() if line.startswith("| ")]
    assert "subject" in headers[0] and "The subject's outputs are within tolerance" in index


def test_the_bench_plot_shows_each_variant_with_its_spread(correct_run: tuple[Path, int, dict[str, Any]]) -> None:
    out, _, document = correct_run
    root = ElementTree.parse(out / document["plot"]).getroot()
    classes = [element.get("class") for element in root.iter()]
    variants = document["configuration"]["variants"]
    assert classes.count("series") == len(variants)
    assert classes.count("band") == len(variants)
    assert classes.count("whisker") == len(variants) * len(CONTEXTS.split(","))
    titles = [t.text for element in root.iter() if element.get("class") == "series" for t in element.iter(f"{SVG}title")]
    assert titles[0].startswith("subject ") and "WRONG" not in titles[0]


def test_a_wrong_subject_is_timed_but_marked(tmp_path: Path) -> None:
    code, document = bench(tmp_path, str(MUTANT), "--repeats", "1")
    assert code == ExitCode.BENCH_INCORRECT
    assert schema_errors("bench", document) == []
    assert not document["subject_correct"]
    for context in CONTEXTS.split(","):
        assert document["medians_us"]["subject"][context] > 0
        assert not document["correctness"]["subject"][context]["passed"]
        assert document["correctness"]["impl"][context]["passed"]
    assert any(p.startswith("subject at context") for p in document["problems"])
    rows = [line for line in (tmp_path / "bench.md").read_text().splitlines() if line.startswith("|")]
    assert any("**WRONG**" in row for row in rows)
    assert "outputs are WRONG" in (tmp_path / "index.md").read_text()
    assert "(WRONG output)" in (tmp_path / document["plot"]).read_text()



@pytest.mark.parametrize("ending", [
    "import atexit\natexit.register(lambda: print('bye from the subject'))\n",  # stdout after the result
    "import os\n_real = paged_attention\n\n\ndef paged_attention(*args, **kwargs):\n    os._exit(0)\n",
    "import sys\n_real = paged_attention\n\n\ndef paged_attention(*args, **kwargs):\n    sys.exit(3)\n",
], ids=["prints-at-exit", "os-exit-in-a-call", "sys-exit-in-a-call"])
def test_a_subject_that_prints_or_exits_is_an_error_entry_not_a_crash(tmp_path: Path, ending: str) -> None:
    """The measuring process's outcome was the last line of its stdout: a subject printing at exit made it a
    JSONDecodeError, one exiting inside a call an IndexError, each ending bench with exit 9."""
    subject = tmp_path / "subject.py"
    subject.write_text(CORRECT_SUBJECT + ending)
    code = main(["bench", "--quick", "--subject", str(subject), "--contexts", "16", "--repeats", "1",
                 "--out", str(tmp_path / "run")])
    document = json.loads((tmp_path / "run" / "bench.json").read_text())
    if "atexit" in ending:
        assert code == ExitCode.OK, document["problems"]
    else:
        assert code == ExitCode.BENCH_INCORRECT
        assert any("subject" in problem for problem in document["problems"]), document["problems"]
        assert document["correctness"]["impl"]["16"]["passed"]


def test_a_subject_that_never_returns_is_an_error_entry_at_the_process_timeout(tmp_path: Path) -> None:
    """The measuring process had no time limit: bench (and report's bench stage) waited for ever."""
    import time

    subject = tmp_path / "subject.py"
    subject.write_text(CORRECT_SUBJECT + "import time\n\n\ndef paged_attention(*args, **kwargs):\n"
                       "    while True:\n        time.sleep(1)\n")  # fmt: skip
    started = time.monotonic()
    code = main(["bench", "--quick", "--subject", str(subject), "--contexts", "16", "--repeats", "1",
                 "--process-timeout", "15", "--out", str(tmp_path / "run")])  # fmt: skip
    assert time.monotonic() - started < 120
    document = json.loads((tmp_path / "run" / "bench.json").read_text())
    assert code == ExitCode.BENCH_INCORRECT
    assert document["configuration"]["process_timeout_s"] == 15
    assert "ran past --process-timeout 15 s" in json.dumps(document["errors"]), document["errors"]
    assert document["correctness"]["impl"]["16"]["passed"]


def test_an_interrupted_bench_keeps_its_finished_contexts_and_does_not_pass(monkeypatch, tmp_path: Path, capsys) -> None:
    """Ctrl-C or SIGTERM used to leave an empty folder after minutes of measurements."""
    from pagecheck.bench import stage

    real, runs = stage.run_bench, []

    def run_bench(config):
        runs.append(config.contexts)
        if len(runs) == 2:
            raise KeyboardInterrupt
        return real(config)

    monkeypatch.setattr(stage, "run_bench", run_bench)
    code = main(["bench", "--quick", "--contexts", "16,64,256", "--repeats", "1", "--out", str(tmp_path)])
    assert code == ExitCode.INTERRUPTED
    assert "interrupted after 1 of 3 contexts; bench.md keeps the contexts that finished" in capsys.readouterr().err
    document = json.loads((tmp_path / "bench.json").read_text())
    assert document["interrupted"] == {"finished": 1, "planned": 3} and document["correct"] is False
    assert document["configuration"]["contexts"] == [16] and list(document["medians_us"]["subject"]) == ["16"]
    assert "INCOMPLETE: interrupted after 1 of 3 contexts" in (tmp_path / "bench.md").read_text()
    assert "**INCOMPLETE:** interrupted after 1 of 3 contexts" in (tmp_path / "index.md").read_text()
    # Every output measured was right: the verdicts say incomplete (they said FAIL, "a variant ... is outside
    # tolerance").
    assert "**Correctness: INCOMPLETE**" in (tmp_path / "bench.md").read_text()
    assert "**Verdict: INCOMPLETE**: stopped before `bench` finished (interrupted, or its process ended)." in (tmp_path / "index.md").read_text()
    pytest.importorskip("jsonschema")
    assert schema_errors("bench", document) == []

def test_compare_prints_and_plots_the_ratio_per_shape(
    correct_run: tuple[Path, int, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous, _, before = correct_run
    code, document = bench(tmp_path, "impl", "--repeats", str(REPEATS), "--compare", str(previous / "bench.json"))
    assert code == ExitCode.OK
    assert schema_errors("bench", document) == []
    comparison = document["comparison"]
    # impl is the subject now: subject, dense_gather and mlx_sdpa compare at both contexts.
    assert {(row["variant"], row["context"]) for row in comparison["rows"]} == {
        (v, int(c)) for v in ("subject", "dense_gather", "mlx_sdpa") for c in CONTEXTS.split(",")
    }
    assert any("subject" in difference for difference in comparison["differences"])
    for row in comparison["rows"]:
        assert row["ratio"] == pytest.approx(
            document["medians_us"][row["variant"]][str(row["context"])] / before["medians_us"][row["variant"]][str(row["context"])]
        )
        assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    printed = capsys.readouterr().out
    assert "now / before" in printed and "beyond the noise" in printed
    root = ElementTree.parse(tmp_path / comparison["plot"]).getroot()
    classes = [element.get("class") for element in root.iter()]
    assert classes.count("series") == 3 and classes.count("band") == 3 and classes.count("reference") == 1
    assert "Compared with" in (tmp_path / "bench.md").read_text()


@pytest.mark.parametrize(
    "content", [{"kind": "tolerance"}, {"source": "pagecheck.bench", "samples": 5},
                {"source": "pagecheck.bench", "samples": {"impl": {"16": [[1.0, "x"]]}}},
                # a valid number no call takes: its ratio to this run's timings was infinite, and the plot failed
                {"source": "pagecheck.bench", "samples": {"impl": {"16": [[1e-320]]}}}],
    ids=["another-report", "samples-not-a-table", "a-timing-not-a-number", "a-timing-of-1e-320"],
)  # fmt: skip
def test_compare_refuses_a_file_that_is_not_a_benchmark(tmp_path: Path, content: dict[str, Any]) -> None:
    # Refused before anything is measured: a malformed file once failed with AttributeError after the run.
    other = tmp_path / "not-bench.json"
    other.write_text(json.dumps(content))
    assert main(["bench", "--quick", "--compare", str(other), "--out", str(tmp_path / "out")]) == ExitCode.USAGE
    assert not (tmp_path / "out").exists()


def test_compare_refuses_json_nested_past_the_parsers_depth(tmp_path: Path, capsys) -> None:
    """[[[[... 100,000 deep raised RecursionError out of json.loads: an internal error."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["bench", "--quick", "--compare", str(deep), "--out", str(tmp_path / "out")]) == ExitCode.USAGE
    assert f"--compare {deep}: cannot read a benchmark result: its JSON is nested too deeply" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["/dev/zero", "fifo"])
def test_compare_refuses_a_device_or_a_silent_fifo_in_words(tmp_path: Path, capsys, monkeypatch, name: str) -> None:
    """/dev/zero filled memory and a FIFO no one writes to waited for ever; both are usage errors now."""
    from pagecheck import input_files

    monkeypatch.setattr(input_files, "PIPE_WAIT_S", 0.2)
    path = Path(name) if name.startswith("/") else tmp_path / name
    if name == "fifo":
        os.mkfifo(path)
    assert main(["bench", "--quick", "--compare", str(path), "--out", str(tmp_path / "out")]) == ExitCode.USAGE
    said = capsys.readouterr().err
    reason = "it is a character device" if name == "/dev/zero" else "the pipe did not reach its end within 0.2 s"
    assert f"--compare {path}: cannot read a benchmark result: {reason}" in said
    assert not (tmp_path / "out").exists()


def test_compare_with_no_point_in_common_keeps_the_run_and_says_so(
    correct_run: tuple[Path, int, dict[str, Any]], tmp_path: Path
) -> None:
    # Other contexts than the earlier run's: the run's results are written, the comparison has no rows and no
    # plot (its making used to raise after the measurements, losing them).
    previous, _, _ = correct_run
    code = main(["bench", "--quick", "--contexts", "8", "--repeats", "1", "--compare", str(previous / "bench.json"),
                 "--out", str(tmp_path)])  # fmt: skip
    document = json.loads((tmp_path / "bench.json").read_text())
    assert code == ExitCode.OK and schema_errors("bench", document) == []
    assert document["comparison"]["rows"] == [] and document["comparison"]["plot"] is None
    assert "subject at 8" in document["comparison"]["unmatched"]
    assert (tmp_path / "index.md").exists() and not list(tmp_path.glob("bench_compare*"))


def test_the_benchmark_program_writes_only_a_new_file_or_its_own_earlier_result(tmp_path: Path) -> None:
    from pagecheck.bench.attention import parse_args

    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--out", str(other)])
    assert stopped.value.code == 2 and other.read_text() == "keep me"
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path)])  # a folder
    earlier = tmp_path / "bench.json"
    earlier.write_text(json.dumps({"source": "pagecheck.bench", "samples": {}}))
    assert parse_args(["--out", str(earlier)]).out == earlier
    assert parse_args(["--out", str(tmp_path / "new.json")]).out == tmp_path / "new.json"


def spread(medians: list[float]) -> dict[str, Any]:
    result = process_spread([[m] for m in medians])
    assert result is not None
    return result


def test_process_spread_is_over_the_per_process_medians() -> None:
    result = process_spread([[1.0, 2.0, 3.0], [10.0, 11.0, 12.0], [5.0, 6.0, 100.0], [7.0], [8.0]])
    assert result == {"median": 7.0, "q1": 6.0, "q3": 8.0, "iqr": 2.0, "min": 2.0, "max": 11.0, "processes": 5}
    assert process_spread([]) is None
    assert spread([4.0]) == {"median": 4.0, "q1": 4.0, "q3": 4.0, "iqr": 0.0, "min": 4.0, "max": 4.0, "processes": 1}


def test_a_change_is_beyond_the_noise_only_when_the_iqrs_do_not_overlap() -> None:
    before = spread([100.0, 102.0, 104.0, 106.0, 108.0])  # q1 102, q3 106
    assert change_of(spread([107.0, 110.0, 112.0, 114.0, 116.0]), before) == "slower"
    assert change_of(spread([90.0, 92.0, 94.0, 96.0, 101.0]), before) == "faster"
    assert change_of(spread([104.0, 105.0, 106.0, 107.0, 130.0]), before) == "within noise"
    assert change_of(spread([200.0] * (MIN_PROCESSES - 1)), before) == "noise unknown"


def test_compare_reads_a_result_that_has_only_samples() -> None:
    """An earlier bench.json without spreads (schema 1) compares from its samples."""
    config = {"contexts": [128], "variants": ["subject", "dense_gather"], "device": "cpu", "dtype": "bfloat16"}
    current = {"configuration": config, "samples": {"subject": {"128": [[50.0], [52.0], [54.0]]},
                                                    "dense_gather": {"128": [[100.0], [101.0], [99.0]]}}}
    previous = {"configuration": {**config, "variants": ["dense_gather", "paged"]}, "created": "then",
                "samples": {"dense_gather": {"128": [[60.0], [61.0], [62.0]]}, "paged": {"128": [[40.0]]}}}  # fmt: skip
    comparison = compare_runs(current, previous, Path("old/bench.json"))
    assert [(row["variant"], row["change"]) for row in comparison["rows"]] == [("dense_gather", "slower")]
    assert comparison["rows"][0]["ratio"] == pytest.approx(100.0 / 61.0)
    assert comparison["unmatched"] == ["subject at 128"]
    assert comparison["beyond_noise"] == 1


def test_the_benchmark_program_refuses_a_subject_that_does_not_load_and_says_how_far_it_is(
    tmp_path: Path, capsys
) -> None:
    """A subject that did not load was measured as errors for a minute, and the program exited 0; it printed
    nothing until the end, and took a billion --repeats."""
    from pagecheck.bench import attention

    out = tmp_path / "bench.json"
    assert attention.main(["--subject", str(tmp_path / "missing.py"), "--out", str(out)]) == 3
    assert "is not an existing .py file" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit):
        attention.parse_args(["--repeats", "1000000000"])
    assert "argument --repeats: 1000000000 must be in 1..1000" in capsys.readouterr().err
    assert attention.main(["--contexts", "16", "--repeats", "1", "--iterations", "2", "--warmup", "0",
                           "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "pagecheck.bench: 3/3 measuring processes" in err and out.exists()  # impl, dense + gather, MLX SDPA


def test_compare_with_the_run_in_the_same_out_names_where_that_run_went(tmp_path: Path) -> None:
    """`--out D --compare D/bench.json`: the earlier run is set aside into D/earlier-*/ first; the comparison
    named D/bench.json, which is this run's own file."""
    run = ["bench", "--quick", "--contexts", "16", "--repeats", "2", "--out", str(tmp_path)]
    assert main(run) == ExitCode.OK
    assert main([*run, "--compare", str(tmp_path / "bench.json")]) == ExitCode.OK
    earlier = next(tmp_path.glob("earlier-*"))
    assert json.loads((tmp_path / "bench.json").read_text())["comparison"]["previous"] == str(earlier / "bench.json")
