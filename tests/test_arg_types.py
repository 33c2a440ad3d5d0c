"""pagecheck.arg_types: the shared argparse types name the bad text and keep good values."""

from __future__ import annotations

import argparse

import pytest

from pagecheck.arg_types import int_list, positive_int


@pytest.mark.parametrize("text, value", [("1", 1), ("60", 60), (" 7 ", 7)])
def test_positive_int_keeps_positive_values(text: str, value: int) -> None:
    assert positive_int(text) == value


@pytest.mark.parametrize("text, message", [("0", "0 must be positive"), ("-3", "-3 must be positive"),
                                           ("x", "'x' is not an integer"), ("1.5", "'1.5' is not an integer")])
def test_positive_int_names_the_bad_text(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        positive_int(text)


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
