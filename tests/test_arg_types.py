"""pagecheck.arg_types: the shared argparse types name the bad text and keep good values."""

from __future__ import annotations

import argparse

import pytest

from pagecheck.arg_types import int_list, non_negative_int, positive_int


@pytest.mark.parametrize("text, value", [("1", 1), ("60", 60), (" 7 ", 7)])
def test_positive_int_keeps_positive_values(text: str, value: int) -> None:
    assert positive_int(text) == value


@pytest.mark.parametrize("text, message", [("0", "0 must be positive"), ("-3", "-3 must be positive"),
                                           ("x", "'x' is not an integer"), ("1.5", "'1.5' is not an integer")])
def test_positive_int_names_the_bad_text(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        positive_int(text)


def test_non_negative_int_takes_zero_and_names_the_bad_text() -> None:
    assert non_negative_int("0") == 0 and non_negative_int("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match="-1 must be 0 or more"):
        non_negative_int("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="'two' is not an integer"):
        non_negative_int("two")


@pytest.mark.parametrize("argv, message", [(["report", "--jobs", "-1"], "argument --jobs: -1 must be 0 or more"),
                                           (["report", "--repeats", "0"], "argument --repeats: 0 must be positive"),
                                           (["bench", "--repeats", "-2"], "argument --repeats: -2 must be positive")])
def test_commands_refuse_out_of_range_counts_as_usage_errors(argv: list[str], message: str, capsys) -> None:
    from pagecheck.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


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
