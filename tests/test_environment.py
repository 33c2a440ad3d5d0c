"""Provenance comes from the installed distribution's PEP 610 record, never from git of a parent folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pagecheck import environment


class FakeDistribution:
    def __init__(self, record: dict | None) -> None:
        self.record = record

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.record) if name == "direct_url.json" and self.record is not None else None


def use_records(monkeypatch: pytest.MonkeyPatch, *records: dict | None) -> None:
    monkeypatch.setattr(environment.importlib.metadata, "distributions",
                        lambda name: [FakeDistribution(r) for r in records])


def test_an_index_install_has_no_source(monkeypatch: pytest.MonkeyPatch) -> None:
    use_records(monkeypatch, None)
    assert environment.install_source() is None


def test_a_vcs_install_names_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "a" * 40
    use_records(monkeypatch, None, {"url": "https://example.org/pagecheck.git", "vcs_info": {"vcs": "git", "commit_id": commit}})
    assert environment.install_source() == {
        "url": "https://example.org/pagecheck.git", "editable": False, "commit": commit, "dirty": None,
    }


def test_a_plain_folder_install_does_not_read_the_folder_now(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    use_records(monkeypatch, {"url": f"file://{tmp_path}", "dir_info": {}})
    assert environment.install_source() == {"url": f"file://{tmp_path}", "editable": False, "commit": None, "dirty": None}


def test_an_editable_install_reads_its_own_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f.txt").write_text("1")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    use_records(monkeypatch, {"url": f"file://{tmp_path}", "dir_info": {"editable": True}})
    assert environment.install_source() == {"url": f"file://{tmp_path}", "editable": True, "commit": head, "dirty": False}
    (tmp_path / "f.txt").write_text("2")
    assert environment.install_source()["dirty"] is True
