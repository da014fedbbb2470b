"""Fuzz the remote GGUF reader against a hostile loopback server (tests/hostile_hub.py).

Hypothesis draws how the server misbehaves on each range request: the status (206, a 200
with the whole file, 416, 500, a redirect to itself), the ``Content-Range`` it claims
(right, shifted, past the request, a total that changes or lies, garbage, none), how
much body it really sends (all, cut short, dripped), and the bytes themselves (a real
tiny GGUF with bytes flipped, or a header claiming huge counts). Whatever it does,
:func:`~app.sources.remote.read_remote_header` returns a header or raises a
:class:`~app.errors.GGTuneError` — never another exception — within a time bound, and
never pulls more than the reader's limits allow.
"""

from __future__ import annotations

import signal
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.errors import GGTuneError
from app.model.gguf_reader import MAX_HEADER_BYTES, Header
from app.sources.remote import MAX_BLOCK_BYTES, read_remote_header
from tests.app.test_gguf_fuzz import no_hang
from tests.fake_hub import write_split_model
from tests.hostile_hub import Exchange, HostileHub


@dataclass
class Misbehaviour:
    """What the server does, request by request (the last entry repeats)."""

    data: bytes = field(default=b"", repr=False)
    claimed_size: int = 0
    statuses: list[int] = field(default_factory=lambda: [206])
    ranges: list[str] = field(default_factory=lambda: ["right"])
    bodies: list[str] = field(default_factory=lambda: ["all"])
    served: int = 0
    requests: int = 0


def _pick(items: list[str] | list[int], i: int) -> str | int:
    return items[min(i, len(items) - 1)]


def answer(ex: Exchange, m: Misbehaviour) -> None:
    i = m.requests
    m.requests += 1
    status = int(_pick(m.statuses, i))
    size = m.claimed_size
    want = ex.range or (0, None)
    first = want[0]
    last = size - 1 if want[1] is None else min(want[1], size - 1)
    if status == 302:
        ex.send(302, b"", {"Location": ex.path})
        return
    if status in (416, 500):
        ex.send(status, b"", {"Content-Range": f"bytes */{size}"})
        return
    if status == 200:
        body = m.data[:65536]
        ex.send(200, body, {"Content-Length": str(len(body))})
        return
    body = (m.data[first : last + 1] + bytes(max(0, last + 1 - max(first, len(m.data)))))[
        : max(0, last + 1 - first)
    ]
    how = _pick(m.ranges, i)
    header = {
        "right": f"bytes {first}-{last}/{size}",
        "shifted": f"bytes {first + 1}-{last + 1}/{size}",
        "past": f"bytes {first}-{last + 1000}/{size}",
        "total-changes": f"bytes {first}-{last}/{size + 1 + i}",
        "total-small": f"bytes {first}-{last}/{max(1, last)}",
        "garbage": "bytes x-y/z",
        "star": f"bytes {first}-{last}/*",
    }.get(str(how))
    headers = {"ETag": '"e"'}
    if header is not None:
        headers["Content-Range"] = header
    body_how = _pick(m.bodies, i)
    m.served += len(body)
    if body_how == "cut":
        ex.head(206, {**headers, "Content-Length": str(len(body))})
        ex.write(body[: len(body) // 2])
        ex._h.close_connection = True
        return
    if body_how == "drip":
        ex.drip(body[:3], 0.01, headers)
        return
    ex.send(206, body, headers)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_split_model(tmp_path_factory.mktemp("fuzz"), "tiny")[0].read_bytes()


def _claiming(count: int, item_type: int) -> bytes:
    key = b"tokenizer.ggml.tokens"
    return (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 1)
        + struct.pack("<Q", len(key))
        + key
        + struct.pack("<IIQ", 9, item_type, count)
    )


@st.composite
def misbehaviours(draw: st.DrawFn, tiny: bytes) -> Misbehaviour:
    kind = draw(st.sampled_from(["tiny", "flipped", "claims"]))
    if kind == "claims":
        data = _claiming(
            draw(st.sampled_from([2**20, 2**27, 10**8, 2**30, 2**62])),
            draw(st.sampled_from([0, 6, 8, 9])),
        )
        claimed = draw(st.sampled_from([len(data), 2**30, 2**40, 10**12]))
    else:
        data = bytearray(tiny)
        if kind == "flipped":
            for _ in range(draw(st.integers(1, 8))):
                pos = draw(st.integers(0, min(len(data) - 1, 4096)))
                data[pos] = draw(st.integers(0, 255))
        data = bytes(data)
        claimed = draw(st.sampled_from([len(data), len(data) // 2, len(data) * 4]))
    n = draw(st.integers(1, 3))
    return Misbehaviour(
        data=data,
        claimed_size=claimed,
        statuses=draw(
            st.lists(st.sampled_from([206, 206, 206, 200, 416, 500, 302]), min_size=n, max_size=n)
        ),
        ranges=draw(
            st.lists(
                st.sampled_from(
                    [
                        "right",
                        "right",
                        "shifted",
                        "past",
                        "total-changes",
                        "total-small",
                        "garbage",
                        "star",
                        "none",
                    ]
                ),
                min_size=n,
                max_size=n,
            )
        ),
        bodies=draw(
            st.lists(st.sampled_from(["all", "all", "cut", "drip"]), min_size=n, max_size=n)
        ),
    )


FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _read(url: str) -> Header | GGTuneError:
    """Return the header at ``url``, or the GGTuneError (any other exception escapes)."""
    try:
        return read_remote_header(url, cache=False, timeout_s=2)
    except GGTuneError as err:
        return err


def _read(url: str) -> Header | GGTuneError:
    """Return the header at ``url``, or the GGTuneError (any other exception escapes)."""
    try:
        return read_remote_header(url, cache=False, timeout_s=2)
    except GGTuneError as err:
        return err


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")
def test_the_remote_reader_survives_a_hostile_server(
    hostile_hub: HostileHub, tiny_gguf: bytes
) -> None:
    current = Misbehaviour()
    hostile_hub.on(r"^/files/", lambda ex: answer(ex, current))
    outcomes: list[str] = []

    @FUZZ
    @given(m=misbehaviours(tiny_gguf))
    def check(m: Misbehaviour) -> None:
        nonlocal current
        current = m
        with no_hang():
            outcome = _read(f"{hostile_hub.endpoint}/files/m.gguf")
        outcomes.append(type(outcome).__name__)
        if isinstance(outcome, GGTuneError):
            assert "\n" not in str(outcome)
        else:
            assert outcome.data_offset <= MAX_HEADER_BYTES
        assert m.served <= MAX_HEADER_BYTES + 4 * MAX_BLOCK_BYTES

    check()
    assert len(outcomes) >= 100  # the examples ran (hypothesis may add a few shrinks)
    assert "Header" in outcomes  # some misbehaviour still reads: the fuzz is not all errors


def test_the_fuzz_server_serves_a_real_file_honestly(
    hostile_hub: HostileHub, tiny_gguf: bytes, tmp_path: Path
) -> None:
    current = Misbehaviour(data=tiny_gguf, claimed_size=len(tiny_gguf))
    hostile_hub.on(r"^/files/", lambda ex: answer(ex, current))
    header = read_remote_header(f"{hostile_hub.endpoint}/files/m.gguf", cache=False)
    assert header.tensors
