"""``ggtune search WORDS`` against the local fake hub (and a port nobody listens on)."""

from __future__ import annotations

import json

import pytest

from tests.fake_hub import REPO, FakeHub, unreachable_endpoint
from ui.cli.main import run


def test_search_prints_repos_by_downloads(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["search", "ggtune-test", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"repo": REPO, "downloads": 1200, "likes": 7, "gated": False},
        {"repo": "ggtune-test/gated-GGUF", "downloads": 40, "likes": 1, "gated": True},
    ]
    assert run(["search", "ggtune", "demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["repo", "downloads", "likes"]
    assert out[2].split() == [REPO, "1,200", "7"]
    assert out[-1] == f"compare a repo's files at your settings: ggtune hf {REPO} -c 16384"
    hub.clear()
    assert run(["search", "ggtune", "--limit", "1", "--json"]) == 0
    assert [r["repo"] for r in json.loads(capsys.readouterr().out)] == [REPO]
    (asked,) = hub.requests("/api/models?")
    assert "limit=1" in asked.path


def test_search_finds_nothing_in_words(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["search", "no-such-model"]) == 0
    assert capsys.readouterr().out.strip() == (
        "no repo with GGUF files matches 'no-such-model'; try fewer or other words"
    )


def test_search_limit_and_offline_are_one_line(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["search", "demo", "--limit", "101"]) == 2
    assert "must be 1 to 100" in capsys.readouterr().err
    monkeypatch.setenv("HF_ENDPOINT", unreachable_endpoint())
    assert run(["search", "qwen3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ggtune: ")
    assert err.count("\n") == 1
