"""pagecheck.arg_types: the shared argparse types name the bad text and keep good values."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from tests.grading_results import result_document
from pagecheck.grading.results_store import FORMAT, VERSION, result_path
from pagecheck.arg_types import int_in, int_list, non_negative_int, path_arg, positive_int, positive_number, seed_int


@pytest.mark.parametrize("text, value", [("1", 1), ("60", 60), (" 7 ", 7)])
def test_positive_int_keeps_positive_values(text: str, value: int) -> None:
    assert positive_int(text) == value


@pytest.mark.parametrize("text, message", [("0", "0 must be positive"), ("-3", "-3 must be positive"),
                                           ("x", "'x' is not an integer"), ("1.5", "'1.5' is not an integer")])
def test_positive_int_names_the_bad_text(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        positive_int(text)


def test_int_in_keeps_its_bounds_and_names_the_bad_text() -> None:
    slots = int_in(1, 1024)
    assert slots("1") == 1 and slots("1024") == 1024
    for text in ("0", "1025"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"{text} must be in 1..1024"):
            slots(text)
    with pytest.raises(argparse.ArgumentTypeError, match="'8x' is not an integer"):
        slots("8x")


def test_non_negative_int_takes_zero_and_names_the_bad_text() -> None:
    assert non_negative_int("0") == 0 and non_negative_int("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match="-1 must be 0 or more"):
        non_negative_int("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="'two' is not an integer"):
        non_negative_int("two")


@pytest.mark.parametrize("argv, message", [(["report", "--jobs", "-1"], "argument --jobs: -1 must be in 0..256"),
                                           (["report", "--repeats", "0"], "argument --repeats: 0 must be in 1..1000"),
                                           (["bench", "--repeats", "-2"], "argument --repeats: -2 must be in 1..1000"),
                                           (["tolerance", "--seed", "-3"], "argument --seed: -3 must be in 0..2**64-1"),
                                           (["report", "--seed", str(2**64)], f"argument --seed: {2**64} must be in"),
                                           (["serve-bench", "--seed", "-1"], "argument --seed: -1 must be in"),
                                           (["report", "--jobs", "257"], "argument --jobs: 257 must be in 0..256"),
                                           # An alarm past ~1e9 s overflowed time_t and failed every check.
                                           (["report", "--check-timeout", "1e10"],
                                            "argument --check-timeout: 1e10 is above the most allowed, 1e+06"),
                                           # 1e-300 failed every check of a correct subject as broken.
                                           (["report", "--check-timeout", "1e-300"],
                                            "argument --check-timeout: 1e-300 is below the least allowed, 0.1"),
                                           (["tolerance", "--check-timeout", "0.05"],
                                            "argument --check-timeout: 0.05 is below the least allowed, 0.1"),
                                           # A trace of a billion requests filled memory before any step.
                                           (["serve-bench", "--requests", "1000000000"],
                                            "argument --requests: 1000000000 must be in 1..100000"),
                                           # A billion rounds ate memory before the first run.
                                           (["serve-bench", "--rounds", "101"], "argument --rounds: 101 must be in 1..100"),
                                           # An empty --out wrote the report into the current folder.
                                           (["report", "--out", ""], "argument --out: an empty path"),
                                           (["grade", "--out", " ", "sub.py"], "argument --out: an empty path"),
                                           (["serve-bench", "--variants", "dense,paged,dense"],
                                            "names dense more than once"),
                                           # A context of 1e9 was a 3.7 TiB MemoryError, reported as a wrong bench.
                                           (["bench", "--contexts", "128,1000000000"], "must be in 1..262144")])
def test_commands_refuse_out_of_range_counts_as_usage_errors(argv: list[str], message: str, capsys) -> None:
    from pagecheck.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_seed_int_takes_the_whole_unsigned_64_bit_range() -> None:
    assert seed_int("0") == 0 and seed_int(str(2**64 - 1)) == 2**64 - 1
    for text, message in (("-1", "-1 must be in 0..2"), (str(2**64), "must be in 0..2"), ("s", "'s' is not")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            seed_int(text)


def test_parsers_report_the_option_with_the_text(capsys) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=positive_int)
    with pytest.raises(SystemExit):
        parser.parse_args(["--calls", "0"])
    assert "argument --calls: 0 must be positive" in capsys.readouterr().err


def test_int_list_bounds_each_value() -> None:
    assert int_list("stages", least=2)("2,3,4") == (2, 3, 4)
    with pytest.raises(argparse.ArgumentTypeError, match="stages='3,1' must be at least 2; 1 is not"):
        int_list("stages", least=2)("3,1")
    assert int_list("splits", most=4)("1,4") == (1, 4)
    with pytest.raises(argparse.ArgumentTypeError, match=r"splits='2,5' must be in 1\.\.4; 5 is not"):
        int_list("splits", most=4)("2,5")
    with pytest.raises(argparse.ArgumentTypeError, match="must be comma-separated integers"):
        int_list("contexts")("128,x")


def test_positive_number_refuses_zero_negative_and_non_finite() -> None:
    assert positive_number("0.25") == 0.25 and positive_number("300") == 300.0
    for text, message in (("0", "0 must be a finite number above 0"), ("-1", "-1 must be"), ("inf", "inf must be"),
                          ("nan", "nan must be"), ("1e999", "1e999 must be"), ("x", "'x' is not a number")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            positive_number(text)


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--timeout", "inf", "argument --timeout: inf must be a finite number above 0"),
        ("--memory", "nan", "argument --memory: nan must be a finite number above 0"),
        ("--timeout", "1e300", "argument --timeout: 1e300 is above the most allowed, 1e+06"),
        ("--build-timeout", "2e6", "argument --build-timeout: 2e6 is above the most allowed, 1e+06"),
        ("--call-timeout", "1e7", "argument --call-timeout: 1e7 is above the most allowed, 1e+06"),
        # Limits no run meets: every submission timed out, or every call failed, with exit 0.
        ("--timeout", "0.001", "argument --timeout: 0.001 is below the least allowed, 1"),
        ("--build-timeout", "0.5", "argument --build-timeout: 0.5 is below the least allowed, 1"),
        ("--call-timeout", "1e-9", "argument --call-timeout: 1e-9 is below the least allowed, 0.1"),
        ("--memory", "1e15", "argument --memory: 1e15 is above the most allowed, 1.04858e+06"),
        ("--disk", "2e6", "argument --disk: 2e6 is above the most allowed, 1.04858e+06"),
        # int(1e300 * GIB) overflowed: a traceback.
        ("--memory", "1e300", "argument --memory: 1e300 is above the most allowed"),
        ("--seed-file", "missing.txt", "--seed-file='{tmp}/missing.txt' cannot be read: No such file or directory"),
        # An empty file's error told the user to leave --seed out.
        ("--seed-file", "blank.txt", "--seed-file='{tmp}/blank.txt' holds no secret (it is empty or only spaces)"),
        ("--jobs", "0", "argument --jobs: 0 must be in 1..256"),
        ("--jobs", "257", "argument --jobs: 257 must be in 1..256"),
        # A list of nothing graded every invariant.
        ("--invariants", ",", "invariants=',' names no invariant (leave the option out to grade all)"),
        ("--invariants", "", "invariants='' names no invariant"),
        ("--rubric", "bad.toml", "rubric='{tmp}/bad.toml' is not valid TOML: "),
        # A device or a FIFO no one writes to: reading never ended (memory filled, or the run waited for ever).
        ("--seed-file", "/dev/zero", "--seed-file='/dev/zero' cannot be read: it is a character device, not a "
                                     "regular file or a pipe"),
        ("--seed-file", "fifo", "--seed-file='{tmp}/fifo' cannot be read: the pipe did not reach its end within"),
        ("--rubric", "/dev/zero", "rubric='/dev/zero' cannot be read: it is a character device"),
        ("--rubric", "fifo", "rubric='{tmp}/fifo' cannot be read: the pipe did not reach its end within"),
        ("--rubric", "folder", "rubric='{tmp}/folder' cannot be read: it is a folder, not a file"),
        # tomllib's RecursionError was an internal error
        ("--rubric", "deep.toml", "rubric='{tmp}/deep.toml' is nested too deeply to be a rubric"),
    ],
)
def test_grade_refuses_limits_out_of_range_before_grading(tmp_path, capsys, monkeypatch, option: str, value: str,
                                                          message: str) -> None:  # fmt: skip
    """Limits no sandbox could hold (an rlimit past its type, a timeout no wait takes) and files no one could
    read whole are usage errors, named, before any submission is graded."""
    from pagecheck import input_files
    from pagecheck.cli import main

    monkeypatch.setattr(input_files, "PIPE_WAIT_S", 0.2)
    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    if value == "fifo":
        os.mkfifo(tmp_path / value)
    if value == "folder":
        (tmp_path / value).mkdir()
    if value in ("fifo", "folder"):
        value = str(tmp_path / value)
    elif option == "--seed-file":
        if value == "blank.txt":
            (tmp_path / value).write_text(" \n")
        value = str(tmp_path / value)
    elif option == "--rubric" and value == "bad.toml":
        (tmp_path / value).write_text("[points\n")
        value = str(tmp_path / value)
    elif option == "--rubric" and value == "deep.toml":
        (tmp_path / value).write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
        value = str(tmp_path / value)
    try:
        code = main(["grade", option, value, str(submission), "--out", str(tmp_path / "out")])
    except SystemExit as stopped:
        code = stopped.code
    captured = capsys.readouterr()
    assert code == 2
    assert message.format(tmp=tmp_path) in captured.out + captured.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["report", "tolerance", "bench", "serve-bench", "grade"])
def test_an_out_folder_that_cannot_be_made_is_a_usage_error_before_any_run(tmp_path, capsys, command: str) -> None:
    """--out naming a file (or a folder under one) stops the command at once, with exit 2 and the reason, rather
    than in a traceback after the run (serve-bench once made its folder only at the end)."""
    from pagecheck.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    extra = [str(submission)] if command == "grade" else []
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop-back")
    (tmp_path / "loop-back").symlink_to(loop)
    for out, reason in ((blocker, "is a file, not a folder"), (blocker / "below", "cannot be created: Not a directory"),
                        # grade: an internal error (resolve's RuntimeError); the others: "File exists"
                        (loop, "is a symbolic link that leads back to itself")):
        code = main([command, *extra, "--out", str(out)])
        assert code == 2
        assert f"pagecheck {command}: --out={str(out)!r} {reason}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "tolerance", "bench", "serve-bench", "grade"])
def test_an_out_folder_another_run_holds_is_a_usage_error(tmp_path, capsys, command: str) -> None:
    """Two runs into one --out each set the other's files aside and wrote over them (the index named one subject
    over the other's data); the second is refused now, and the folder is free again once a run ends."""
    import fcntl

    from pagecheck.cli import main

    out = tmp_path / "out"
    out.mkdir()
    other_run = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(other_run, fcntl.LOCK_EX | fcntl.LOCK_NB)
    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    extra = [str(submission), "--seed", "s" * 32] if command == "grade" else []
    try:
        assert main([command, *extra, "--out", str(out)]) == 2
    finally:
        os.close(other_run)
    assert f"--out={str(out)!r} is in use by another pagecheck run" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    held = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    from pagecheck.commands.options import make_out_dir, release_out_dirs

    make_out_dir(out)  # held by this process until released
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        release_out_dirs()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(held)


def test_an_out_link_to_a_folder_not_made_yet_makes_that_folder(tmp_path) -> None:
    """`ln -s /scratch/run1 out; pagecheck report --out out`: the report goes to /scratch/run1 (it said "File
    exists")."""
    from pagecheck.commands.options import make_out_dir, release_out_dirs

    link = tmp_path / "out"
    link.symlink_to(tmp_path / "scratch" / "run1")
    assert make_out_dir(link) == link
    release_out_dirs()
    assert (tmp_path / "scratch" / "run1").is_dir() and link.is_dir()


@pytest.mark.parametrize("command", ["report", "bench"])
def test_a_sandboxed_subject_is_refused_where_it_cannot_run(command: str, capsys) -> None:
    # report's suite and bench's timing processes cannot host grading's sandboxed worker: once an exit 8 or 5
    # after a start, now a usage error naming where sandbox: subjects run.
    from pagecheck.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([command, "--subject", "sandbox:impl"])
    assert stopped.value.code == 2
    assert "sandbox: subjects run only under `pagecheck tolerance` and `pagecheck grade`" in capsys.readouterr().err


def _default_report_dir(barrier, answers, where: str) -> None:
    from pagecheck.commands.options import report_dir

    barrier.wait()
    try:
        answers.put(str(report_dir(argparse.Namespace(out=None, subject="reference", invoked_in=where),
                                   default=Path("report"))))  # fmt: skip
    except Exception as exc:
        answers.put(f"error: {exc}")
    barrier.wait()  # each holds its folder until all have chosen, as runs do


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked runs")
def test_runs_started_together_each_get_their_own_default_folder(tmp_path) -> None:
    # Seen: of six runs started in the same second, some were refused "in use by another pagecheck run" (one
    # picked the folder another had just found free); 7 of 20 such rounds.
    import multiprocessing

    context = multiprocessing.get_context("fork")
    (tmp_path / "0" / "report").mkdir(parents=True)  # an earlier run's folder: never reused
    for round_ in range(8):
        where = tmp_path / str(round_)
        barrier, answers = context.Barrier(6), context.Queue()
        runs = [context.Process(target=_default_report_dir, args=(barrier, answers, str(where))) for _ in range(6)]
        for run in runs:
            run.start()
        chosen = sorted(answers.get(timeout=60) for _ in runs)
        for run in runs:
            run.join(60)
        assert not [answer for answer in chosen if answer.startswith("error")], chosen
        assert len(set(chosen)) == 6
        assert (str(where / "report") in chosen) == (round_ > 0)


def test_grade_refuses_an_out_whose_other_results_were_graded_another_way(tmp_path, capsys) -> None:
    # Grading one submission on context_len, then another on release_once into the same --out made one scoreboard
    # of the two, each scored on different clauses.
    import json

    from pagecheck.cli import main

    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    out = tmp_path / "out"
    earlier = result_path(out, "other")
    earlier.parent.mkdir(parents=True)
    earlier.write_text(json.dumps(result_document("other", {"release_once": ["pass"]}, settings={"profile": "thorough"})))
    code = main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32, "--invariants", "context_len"])
    assert code == 2
    assert "holds results for ['other'] graded with other settings" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "results").iterdir()) == ["other.json"]


@pytest.mark.parametrize(
    "document, words",
    [({"format": FORMAT, "version": VERSION}, "'name' is a required property"),
     ({**result_document("zzz", {"context_len": ["pass"]}), "checks": "x"}, "$.checks: 'x' is not of type 'array'")],
    ids=["no-name", "checks-a-string"],
)
def test_grade_refuses_an_out_holding_a_broken_result_before_grading(tmp_path, capsys, document, words) -> None:
    """A result edited by hand (the right format and version, the wrong shape) crashed a rerun into its folder
    with KeyError or TypeError; now it is named, with what is wrong, before anything is graded."""
    import json

    from pagecheck.cli import main

    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    out = tmp_path / "out"
    broken = result_path(out, "zzz")
    broken.parent.mkdir(parents=True)
    broken.write_text(json.dumps(document))
    code = main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32])
    said = capsys.readouterr().err
    assert code == 2
    assert f"result {broken} does not follow grade.schema.json: " in said and words in said
    assert sorted(p.name for p in (out / "results").iterdir()) == ["zzz.json"]


@pytest.mark.parametrize(
    "text, words",
    [("{\"format\": \"pagecheck-grade\", \"na", "it cannot be read as JSON"),
     (None, "it is a version 0 result, this grader writes version")],
    ids=["cut-short", "older-version"],
)
def test_a_result_that_cannot_be_read_is_named_not_left_out(tmp_path, capsys, text, words) -> None:
    """A damaged or older result of a submission this run does not grade was left out of the scoreboard (and of
    a merge) without a word: that student disappeared. Now it is named before anything is graded; one of a
    submission the run grades again is rewritten."""
    import json

    from pagecheck.cli import main

    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    out = tmp_path / "out"
    other = result_path(out, "other")
    other.parent.mkdir(parents=True)
    other.write_text(text if text is not None else json.dumps({**result_document("other", {"context_len": ["pass"]}),
                                                                "version": 0}))  # fmt: skip
    code = main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32, "--invariants", "context_len"])
    said = capsys.readouterr().err
    assert code == 2 and f"result {other} is left unread: {words}" in said
    main(["grade", "merge", str(out), "--out", str(tmp_path / "merged")])
    assert f"result {other} is left unread" in capsys.readouterr().err
    # Named in the run, it is graded again.
    own = result_path(out, "sub")
    own.write_text("{")
    other.unlink()
    assert main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32, "--invariants", "context_len"]) == 0
    assert json.loads(own.read_text())["name"] == "sub"


@pytest.mark.parametrize(
    "skip, given, words",
    [("bench", ["--contexts", "128"], "--contexts set the bench stage"),
     ("bench", ["--process-timeout", "5"], "--process-timeout set the bench stage"),
     ("invariants", ["--invariant", "context_len", "--jobs", "7"], "--invariant, --jobs set the invariants stage")],
    ids=["contexts", "process-timeout", "invariant-and-jobs"],
)
def test_report_refuses_options_of_a_stage_it_skips(tmp_path, capsys, skip: str, given: list[str], words: str) -> None:
    """--process-timeout, --invariant and --jobs were ignored with exit 0 where the stage they set was skipped."""
    from pagecheck.cli import main

    code = main(["report", "--skip", skip, *given, "--out", str(tmp_path / "out")])
    assert code == 2 and f"{words}, which this run skips" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["report", "bench", "tolerance"])
def test_an_empty_subject_names_the_kinds_this_command_takes(capsys, command: str) -> None:
    """report and bench suggested sandbox:SPEC for an empty --subject, which they then refuse."""
    from pagecheck.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([command, "--subject", " "])
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and "argument --subject: an empty spec names no subject; give impl" in said
    assert ("sandbox:SPEC" in said) == (command == "tolerance")


def test_grade_on_the_gpu_grades_one_submission_at_a_time(tmp_path, capsys) -> None:
    """A GPU worker keeps file locks: two submissions' workers side by side could talk through them."""
    from pagecheck.cli import main

    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    code = main(["grade", str(submission), "--device", "gpu", "--jobs", "2", "--out", str(tmp_path / "out")])
    assert code == 2 and "--jobs=2 with --device gpu" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_merge_refused_leaves_no_folder_it_made(tmp_path, capsys) -> None:
    from pagecheck.cli import main

    code = main(["grade", "merge", str(tmp_path / "missing-shard"), "--out", str(tmp_path / "merged")])
    assert code == 2 and not (tmp_path / "merged").exists()


@pytest.mark.parametrize("merge", [False, True], ids=["grade", "merge"])
def test_grade_names_a_loop_of_links(tmp_path, capsys, merge: bool) -> None:
    from pagecheck.cli import main

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    code = main(["grade", *(["merge"] if merge else []), str(loop), "--out", str(tmp_path / "out")])
    what = f"shard directory {str(loop)!r}" if merge else f"submission={str(loop)!r}"
    assert code == 2 and f"{what} is a symbolic link that leads back to itself" in capsys.readouterr().err


def test_grade_takes_one_of_seed_and_seed_file(tmp_path, capsys) -> None:
    """Given both, the file won silently, though --help said --seed comes first."""
    from pagecheck.cli import main

    (tmp_path / "secret.txt").write_text("a secret of some length\n")
    with pytest.raises(SystemExit) as stopped:
        main(["grade", "--seed", "x" * 20, "--seed-file", str(tmp_path / "secret.txt"), str(tmp_path / "sub.py")])
    assert stopped.value.code == 2
    assert "argument --seed-file: not allowed with argument --seed" in capsys.readouterr().err


@pytest.mark.parametrize("blocker", ["grades.md/", "results", "feedback/sub.md/"])
def test_grade_refuses_an_out_that_cannot_take_its_files_before_grading(tmp_path, capsys, blocker: str) -> None:
    """A folder named grades.md (or feedback/<name>.md), or a file named results, failed the run after grading
    (exit 9, a traceback from os.replace) or at its start (FileExistsError)."""
    from pagecheck.cli import main

    submission = tmp_path / "sub.py"
    submission.write_text("x = 1\n")
    out = tmp_path / "out"
    target = out / blocker.rstrip("/")
    if blocker.endswith("/"):
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
    code = main(["grade", str(submission), "--out", str(out), "--seed", "x" * 20])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"holds {blocker.rstrip('/')} as something other than the file or folder a grading run writes there" in err
    assert "graded" not in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("reports/" + "x" * 300, "a name in it ('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'...) is 300 bytes long, over the 255"),
        ("a/" * 2000, "is over the 3840 bytes a folder's path may have here"),
        ("out\0x", "holds a NUL byte"),
    ],
    ids=["long-name", "long-path", "nul"],
)
def test_an_out_path_the_system_cannot_name_is_a_usage_error(text: str, message: str) -> None:
    """Such an --out ended report, tolerance and grade in an internal error (ENAMETOOLONG at its first stat)."""
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        path_arg(text)
    assert path_arg("reports/" + "x" * 255) == Path("reports/" + "x" * 255)


@pytest.mark.parametrize("inside", ["out", "deeper/out", "."], ids=["out", "deeper", "the-submission-itself"])
def test_grade_refuses_an_out_inside_a_submission(tmp_path, capsys, inside: str) -> None:
    """`grade pkg --out pkg/out` staged the grader's folder (the saved secret, other results) into the
    submission's copy, which its code can read, and each rerun graded again (the digest changed)."""
    from pagecheck.cli import main

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("x = 1\n")
    code = main(["grade", str(package), "--out", str(package / inside)])
    captured = capsys.readouterr()
    assert code == 2
    assert f"lies inside submission 'pkg' ({package}): grade into a folder outside every submission" in captured.err
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py"]


def test_a_set_of_points_refuses_repeats_and_comes_sorted() -> None:
    """--contexts 128,128 measured 128 twice, the second run over the first; 1024,128 headlined 128 as the
    longest context."""
    parse = int_list("contexts", most=65536, a_set=True)
    assert parse("1024,128") == (128, 1024)
    with pytest.raises(argparse.ArgumentTypeError, match=r"contexts='128,4,128' names 128 more than once"):
        parse("128,4,128")
    assert int_list("lengths")("5,5") == (5, 5)  # a range, not a set


@pytest.mark.parametrize("command", ["report", "tolerance", "bench"])
def test_a_subject_whose_name_is_not_utf8_is_a_usage_error(tmp_path, capsys, command: str) -> None:
    # Its name goes into every report: it was an internal error (UnicodeEncodeError) once the run had started.
    from pagecheck.cli import main

    name = os.fsdecode(b"\xff\xfe.py")
    with pytest.raises(SystemExit) as stopped:
        main([command, "--subject", str(tmp_path / name), "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert "is not valid UTF-8; rename the file or folder" in capsys.readouterr().err


def test_serve_bench_refuses_a_trace_too_large_to_hold(capsys) -> None:
    # 100,000 prompts of 40,000 tokens each passed every option's own range, then ran out of memory drawing the
    # trace (an internal error under a memory limit, the machine's OOM killer without one).
    from pagecheck.cli import main
    from pagecheck.exit_codes import ExitCode

    code = main(["serve-bench", "--requests", "100000", "--prompt-lens", "40000,40000", "--output-lens", "1,1"])
    assert code == ExitCode.USAGE
    assert "may draw 4,000,000,000 prompt tokens, above the 8,000,000 a trace holds" in capsys.readouterr().err
