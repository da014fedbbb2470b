"""Searching the Hugging Face hub by keyword (app.sources.hf.search_models).

Against the fake hub (tests/fake_hub.py: the search route of ``HfApi.list_models``) for
what is asked and what comes back, and against a hostile one (tests/hostile_hub.py) for
answers the hub never gives; offline is a closed port.
"""

from __future__ import annotations

import json
import time
import urllib.parse

import pytest

from app.errors import GGTuneError, RateLimitedError, RemoteError, RemoteUnavailableError
from app.sources.hf import MAX_SEARCH_CHARS, HubRepo, search_models
from app.sources.refs import is_repo_id
from tests.fake_hub import REPO, FakeHub, unreachable_endpoint
from tests.hostile_hub import Exchange, HostileHub, endless


def _query(hub: FakeHub) -> dict[str, list[str]]:
    (seen,) = hub.requests("/api/models?")
    return urllib.parse.parse_qs(urllib.parse.urlsplit(seen.path).query)


def test_search_asks_as_huggingface_hub_does_and_reads_the_repos(hub: FakeHub) -> None:
    found = search_models("  demo  ")
    assert found == (HubRepo(REPO, 1200, 7, False, "2025-01-01T00:00:00.000Z"),)
    assert _query(hub) == {
        "search": ["demo"],
        "filter": ["gguf"],
        "sort": ["downloads"],
        "direction": ["-1"],
        "limit": ["30"],
    }


def test_search_sorts_by_downloads_and_keeps_only_gguf_repos(hub: FakeHub) -> None:
    found = search_models("ggtune-test")
    # demo-safetensors has the most downloads but no GGUF file: the filter leaves it out.
    assert [(r.repo_id, r.downloads, r.likes, r.gated) for r in found] == [
        (REPO, 1200, 7, False),
        ("ggtune-test/gated-GGUF", 40, 1, True),
    ]
    assert search_models("ggtune-test", limit=1) == found[:1]
    assert search_models("no such words") == ()


def test_search_sends_the_token_to_the_hub(hub: FakeHub) -> None:
    search_models("demo", token="hf_good")
    assert [r.auth for r in hub.requests("/api/models?")] == ["Bearer hf_good"]


@pytest.mark.parametrize("words", ["", "   ", "x" * (MAX_SEARCH_CHARS + 1)])
def test_empty_or_overlong_search_text_is_one_line_and_sends_nothing(
    hub: FakeHub, words: str
) -> None:
    with pytest.raises(RemoteError) as caught:
        search_models(words)
    assert "\n" not in str(caught.value)
    assert not hub.requests("/api/")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        # Not a repo id, a repeat, a non-dict, counts that are not counts: skipped or None.
        (
            [
                {"id": "org/good-GGUF", "downloads": 5, "likes": 2},
                {"id": "org/good-GGUF", "downloads": 9},
                {"id": "../../etc/passwd"},
                {"id": "no-slash"},
                {"id": "org/name\nX-Injected: 1"},
                {"id": "a/" + "b" * 300},
                {"id": 42},
                "org/string-GGUF",
                None,
                [1, 2],
                {"modelId": "org/old-GGUF", "downloads": -3, "likes": True},
                {"id": "org/str-counts", "downloads": "many", "likes": 1.5, "gated": "auto"},
            ],
            [
                HubRepo("org/good-GGUF", 5, 2),
                HubRepo("org/old-GGUF", None, None),
                HubRepo("org/str-counts", None, None, True),
            ],
        ),
        ([], []),
    ],
)
def test_a_garbled_search_answer_keeps_only_real_repos(
    hostile_hub: HostileHub, answer: object, expected: list[HubRepo]
) -> None:
    hostile_hub.on(r"^/api/models\?", lambda ex: ex.json(answer))
    assert list(search_models("good")) == expected


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"error": "Invalid sort"}', "not a list"),
        (b"<html>Hugging Face is down</html>", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'"just a string"', "not a list"),
    ],
)
def test_an_answer_that_is_not_a_list_of_repos_is_one_line(
    hostile_hub: HostileHub, body: bytes, match: str
) -> None:
    hostile_hub.on(r"^/api/models\?", lambda ex: ex.send(200, body))
    with pytest.raises(RemoteError, match=match) as caught:
        search_models("demo")
    assert "\n" not in str(caught.value)


def test_a_huge_answer_stops_at_the_limit(hostile_hub: HostileHub) -> None:
    many = [{"id": f"org/m{i}-GGUF", "downloads": i} for i in range(5000)]
    hostile_hub.on(r"^/api/models\?", lambda ex: ex.json(many))
    assert len(search_models("m", limit=7)) == 7


def test_an_endless_search_answer_is_cut_off(hostile_hub: HostileHub) -> None:
    hostile_hub.on(
        r"^/api/models\?", lambda ex: ex.stream(endless(b'{"id": "org/x-GGUF"},' * 1000, b"["))
    )
    with pytest.raises(RemoteError, match=r"too large|too big"):
        search_models("x")


def test_a_dripping_search_answer_hits_the_deadline(hostile_hub: HostileHub) -> None:
    body = json.dumps([{"id": "org/x-GGUF"}]).encode()
    hostile_hub.on(r"^/api/models\?", lambda ex: ex.drip(body, 0.3))
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"too slow|deadline|within"):
        search_models("x", timeout_s=1.0)
    assert time.monotonic() - started < 6


def test_rate_limited_search_says_so(hostile_hub: HostileHub) -> None:
    def limited(ex: Exchange) -> None:
        ex.send(429, b'{"error": "slow down"}', {"Retry-After": "30"})

    hostile_hub.on(r"^/api/models\?", limited)
    with pytest.raises(RateLimitedError):
        search_models("x")


def test_offline_search_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", unreachable_endpoint())
    monkeypatch.setenv("HF_TOKEN", "")
    with pytest.raises(RemoteUnavailableError) as caught:
        search_models("qwen3")
    assert isinstance(caught.value, GGTuneError)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("org/name", True),
        ("unsloth/Qwen3-8B-GGUF", True),
        ("org/name\n", False),
        ("../x", False),
        ("org/a/b", False),
        ("a/" + "b" * 300, False),
    ],
)
def test_is_repo_id(text: str, ok: bool) -> None:
    assert is_repo_id(text) is ok
