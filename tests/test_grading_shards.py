"""--shard i/n: a split that depends only on submission names."""

from __future__ import annotations

import re

import pytest

from pagecheck.grading.shards import Shard, parse_shard, shard_of

NAMES = [f"student{i:03d}" for i in range(200)]


def test_every_name_lands_in_exactly_one_shard() -> None:
    for count in (1, 2, 3, 7):
        shards = [Shard(i, count) for i in range(1, count + 1)]
        assert all(sum(s.holds(name) for s in shards) == 1 for name in NAMES)


def test_split_ignores_the_other_names() -> None:
    alone = {name: shard_of(name, 4) for name in NAMES}
    assert {name: shard_of(name, 4) for name in reversed(NAMES)} == alone
    assert len(set(alone.values())) == 4  # 200 names reach every shard


@pytest.mark.parametrize("text", ["", "1", "0/2", "3/2", "a/b", "1/0", "-1/2", "\u00b2/3"])
def test_bad_shard_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="shard"):
        parse_shard(text)


def test_shard_round_trips() -> None:
    assert str(parse_shard(" 2/5")) == "2/5"


def test_merge_refuses_a_folder_that_no_grade_run_wrote(tmp_path) -> None:
    """A wrong path among the shards is named; a shard that graded nothing (its scoreboard, no results/) is
    merged as an empty shard."""
    from pagecheck.grading.merge import merge_results

    stray, empty = tmp_path / "stray", tmp_path / "empty-shard"
    stray.mkdir()
    empty.mkdir()
    (empty / "grades.md").write_text("# Grades\n")
    with pytest.raises(ValueError, match=r"'.*stray' is not the output of a `pagecheck grade` run \(it has no results/"):
        merge_results([empty, stray], tmp_path / "out")
    (tmp_path / "out").mkdir()
    assert merge_results([empty], tmp_path / "out") == []


def test_merge_refuses_a_shard_named_twice(tmp_path) -> None:
    """`grade merge D D` said a submission was graded 'in both D and D'."""
    from pagecheck.grading.merge import merge_results

    shard = tmp_path / "shard"
    shard.mkdir()
    (shard / "grades.md").write_text("# Grades\n")
    with pytest.raises(ValueError, match="is named more than once"):
        merge_results([shard, tmp_path / "." / "shard"], tmp_path / "out")



def test_merge_refuses_grading_options_it_would_ignore(tmp_path, capsys) -> None:
    """`grade merge D --invariants bogus --force --seed-file /x` merged with exit 0 and said nothing."""
    from pagecheck.cli import main

    shard = tmp_path / "shard"
    shard.mkdir()
    (shard / "grades.md").write_text("# Grades\n")
    code = main(["grade", "merge", str(shard), "--out", str(tmp_path / "m"), "--invariants", "bogus", "--force"])
    assert code == 2
    assert "takes only --out and --rubric (the shards' results hold the rest); --force, --invariants would be ignored" \
        in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
    assert main(["grade", "merge", str(shard), "--out", str(tmp_path / "m")]) == 0


def test_merge_names_shards_cut_differently_or_missing(tmp_path) -> None:
    """Shards 1/2 and 2/3 merged with exit 0, and the submissions of shard 2/2 and 3/3 (graded by no run) were
    simply not on the scoreboard; so was every submission of a shard left out of the merge."""
    from pagecheck.grading.shards import expected_names, write_manifest

    names = NAMES[:20]
    one_of_two, two_of_two, two_of_three = (tmp_path / d for d in ("a", "b", "c"))
    for folder, shard in ((one_of_two, Shard(1, 2)), (two_of_two, Shard(2, 2)), (two_of_three, Shard(2, 3))):
        folder.mkdir()
        write_manifest(folder, shard, names)
    assert expected_names([one_of_two, two_of_two]) == frozenset(names)
    assert expected_names([tmp_path]) is None  # no manifest: outputs of runs without --shard
    with pytest.raises(ValueError, match="were cut into different counts"):
        expected_names([one_of_two, two_of_three])
    held = sorted(n for n in names if shard_of(n, 2) == 2)
    with pytest.raises(ValueError, match=re.escape(f"shard 2/2 is missing: no result for {held!r}")):
        expected_names([one_of_two])
    write_manifest(two_of_two, Shard(2, 2), names[:-1])
    with pytest.raises(ValueError, match="were given different submissions"):
        expected_names([one_of_two, two_of_two])
