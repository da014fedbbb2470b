"""A hostile Hugging Face hub (tests/hostile_hub.py, reached through HF_ENDPOINT).

Each test makes one part of the hub lie: a tree entry whose path or checksum climbs out
of the cache, an entry with no checksum, an answer that never ends, a ``Link`` pointing
at itself, one byte every half second, a header that claims 100 million strings, a 416
to a resume. ggtune must give a one-line :class:`~app.errors.GGTuneError`, write nothing
outside the folder it downloads into, and never report an unverified file as downloaded.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import struct
import time
from pathlib import Path

import pytest

from app.errors import DownloadError, GGTuneError, GGUFError, RemoteError
from app.sources.hf import HubFile, ModelEntry, RepoListing, download, list_repo, read_models
from app.sources.remote import read_remote_header
from tests.fake_hub import write_split_model
from tests.hostile_hub import Exchange, HostileHub, endless

REPO = "evil/model-GGUF"
COMMIT = "c" * 40


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Return a small real GGUF (the first shard of gguf's writer's split model)."""
    shards = write_split_model(tmp_path_factory.mktemp("tiny"), "tiny")
    return shards[1].read_bytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git_oid(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def lfs_entry(path: str, data: bytes, *, oid: str | None = None) -> dict[str, object]:
    return {
        "type": "file",
        "path": path,
        "size": len(data),
        "oid": "3" * 40,
        "lfs": {"oid": oid if oid is not None else sha256(data), "size": len(data)},
    }


def files_under(root: Path, skip: Path | None = None) -> set[Path]:
    """Return every path under ``root`` (links included), except under ``skip``."""
    out = set()
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            p = Path(folder) / name
            if skip is None or not p.is_relative_to(skip):
                out.add(p)
    return out


# --------------------------------------------------------------------------- finding 1


def _list_and_download(to: Path | None, cache: Path) -> Path:
    listing = list_repo(REPO)
    entry = listing.models[0] if listing.models else listing.find("Q4_0")
    return download(listing, entry, to=to, hub_cache=cache)


@pytest.mark.parametrize(
    "where",
    ["path", "lfs-oid", "commit", "path-in-to-folder"],
)
def test_a_listing_cannot_write_outside_the_download_folder(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes, where: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.gguf"
    victim.write_bytes(b"the user's own model")
    cache = tmp_path / "hfcache"
    to = tmp_path / "to"
    to.mkdir()
    climb = "../" * 8 + str(outside.relative_to("/"))
    path, oid, commit = "m-Q4_0.gguf", None, COMMIT
    if where in ("path", "path-in-to-folder"):
        path = f"{climb}/victim.gguf"
    elif where == "lfs-oid":
        oid = f"{climb}/victim.gguf"
    else:
        commit = climb
    hostile_hub.serve_repo(
        REPO, commit=commit, tree=[lfs_entry(path, model_bytes, oid=oid)], blobs={path: model_bytes}
    )
    before = files_under(tmp_path)
    with pytest.raises(GGTuneError) as caught:
        _list_and_download(to if where == "path-in-to-folder" else None, cache)
    assert "\n" not in str(caught.value)
    assert re.search("left out|commit id", str(caught.value)), caught.value
    assert victim.read_bytes() == b"the user's own model"
    assert not victim.is_symlink()
    new = files_under(tmp_path, skip=cache) - before
    assert not {p for p in new if not p.is_relative_to(to)}, "written outside the cache"


@pytest.mark.parametrize(
    "hub_file",
    [
        HubFile("../../escape.gguf", 10, "a" * 64, "b" * 40),
        HubFile("ok.gguf", 10, "../../../escape", "b" * 40),
        HubFile("sub/../../../escape.gguf", 10, "a" * 64, "b" * 40),
        HubFile("/abs/escape.gguf", 10, "a" * 64, "b" * 40),
        HubFile("ok.gguf", 10, None, "../../x"),
    ],
    ids=["dotdot-path", "dotdot-sha", "inner-dotdot", "absolute", "dotdot-blob-id"],
)
def test_download_refuses_a_hand_made_listing_that_climbs_out(
    tmp_path: Path, hub_file: HubFile
) -> None:
    listing = RepoListing(REPO, "main", COMMIT, "http://127.0.0.1:9", (), ())
    entry = ModelEntry(hub_file.path, "", (hub_file,))
    cache = tmp_path / "cache" / "hub"
    with pytest.raises(DownloadError, match=r"unsafe|checksum"):
        download(listing, entry, hub_cache=cache, retries=0)
    assert files_under(tmp_path) <= {tmp_path / "cache", cache}


# --------------------------------------------------------------------------- finding 2


def test_a_file_without_a_checksum_is_not_offered(
    hostile_hub: HostileHub, model_bytes: bytes
) -> None:
    entry = {"type": "file", "path": "m-Q4_0.gguf", "size": len(model_bytes), "oid": ""}
    hostile_hub.serve_repo(REPO, commit=COMMIT, tree=[entry], blobs={"m-Q4_0.gguf": model_bytes})
    listing = list_repo(REPO)
    assert listing.models == ()
    assert any("checksum" in issue for issue in listing.issues), listing.issues


def test_a_hand_made_entry_without_a_checksum_is_refused(tmp_path: Path) -> None:
    listing = RepoListing(REPO, "main", COMMIT, "http://127.0.0.1:9", (), ())
    f = HubFile("m.gguf", 10, None, "")
    with pytest.raises(DownloadError, match="checksum"):
        download(listing, ModelEntry("m.gguf", "", (f,)), hub_cache=tmp_path / "hub")
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").rglob("*.gguf"))


def _good_repo(hub: HostileHub, data: bytes) -> None:
    hub.serve_repo(
        REPO, commit=COMMIT, tree=[lfs_entry("m-Q4_0.gguf", data)], blobs={"m-Q4_0.gguf": data}
    )


def test_a_corrupt_cached_blob_of_the_right_size_is_fetched_again(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)
    listing = list_repo(REPO)
    cache = tmp_path / "hub"
    blob = cache / f"models--{REPO.replace('/', '--')}" / "blobs" / sha256(model_bytes)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(bytes(len(model_bytes)))  # right size, wrong bytes
    path = download(listing, listing.find("Q4_0"), hub_cache=cache)
    assert sha256(Path(path).read_bytes()) == sha256(model_bytes)


def test_a_different_file_of_the_right_size_in_the_target_folder_is_kept(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)
    listing = list_repo(REPO)
    mine = tmp_path / "m-Q4_0.gguf"
    mine.write_bytes(b"x" * len(model_bytes))
    with pytest.raises(DownloadError, match="differs") as caught:
        download(listing, listing.find("Q4_0"), to=tmp_path)
    assert "\n" not in str(caught.value)
    assert mine.read_bytes() == b"x" * len(model_bytes)


def test_a_matching_file_in_the_target_folder_counts_as_downloaded(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)
    listing = list_repo(REPO)
    (tmp_path / "m-Q4_0.gguf").write_bytes(model_bytes)
    assert download(listing, listing.find("Q4_0"), to=tmp_path) == tmp_path / "m-Q4_0.gguf"
    assert not hostile_hub.requests("/resolve/")


# --------------------------------------------------------------------------- finding 3


def test_an_endless_answer_is_cut_off(hostile_hub: HostileHub) -> None:
    hostile_hub.on(
        r"/revision/",
        lambda ex: ex.stream(
            endless(b'"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",' * 1000, b"[")
        ),
    )
    with pytest.raises(RemoteError, match=r"too large|too big") as caught:
        list_repo(REPO)
    assert "\n" not in str(caught.value)


def test_a_page_that_links_to_itself_ends(hostile_hub: HostileHub, model_bytes: bytes) -> None:
    _good_repo(hostile_hub, model_bytes)

    def loop(ex: Exchange) -> None:
        ex.json(
            [lfs_entry("m-Q4_0.gguf", model_bytes)],
            {"Link": f'<{ex.hub.endpoint}{ex.path}>; rel="next"'},
        )

    hostile_hub.on(r"/tree/", loop)
    with pytest.raises(RemoteError, match=r"loop|pages"):
        list_repo(REPO)
    assert len(hostile_hub.requests("/tree/")) <= 2


def test_a_next_page_on_another_host_gets_no_token(
    hostile_hub: HostileHub, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)
    other = hostile_hub.endpoint.replace("127.0.0.1", "localhost")

    def first(ex: Exchange) -> None:
        if "cursor" in ex.path:
            ex.json([])
            return
        ex.json(
            [lfs_entry("m-Q4_0.gguf", model_bytes)],
            {"Link": f'<{other}{ex.path}&cursor=1>; rel="next"'},
        )

    hostile_hub.on(r"/tree/", first)
    with pytest.raises(RemoteError, match="another host"):
        list_repo(REPO, token="hf_secret")
    assert all(s.auth is None for s in hostile_hub.requests("cursor=1"))


def test_a_dripping_answer_hits_the_deadline(hostile_hub: HostileHub) -> None:
    body = b'{"sha": "' + COMMIT.encode() + b'"}'
    hostile_hub.on(r"/revision/", lambda ex: ex.drip(body, 0.3))
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"too slow|deadline|within"):
        list_repo(REPO, timeout_s=1.0)
    assert time.monotonic() - started < 6


def _claims_strings(count: int) -> bytes:
    """A GGUF header claiming ``count`` empty strings: zeros do the rest."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = b"tokenizer.ggml.tokens"
    return head + struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, count)


def test_a_remote_header_claiming_100m_strings_is_refused_at_once(
    hostile_hub: HostileHub,
) -> None:
    head = _claims_strings(100_000_000)
    size = len(head) + 8 * 100_000_000 + 64

    def zeros(ex: Exchange) -> None:
        first, last = ex.range or (0, size - 1)
        last = size - 1 if last is None else min(last, size - 1)
        body = (head[first : last + 1] + bytes(last + 1 - first))[: last + 1 - first]
        ex.send(206, body, {"Content-Range": f"bytes {first}-{last}/{size}", "ETag": '"e"'})

    hostile_hub.on(r"^/files/big.gguf", zeros)
    with pytest.raises(GGUFError, match="header"):
        read_remote_header(f"{hostile_hub.endpoint}/files/big.gguf", cache=False)
    fetched = sum(
        int(r.range.split("-")[1]) - int(r.range.split("=")[1].split("-")[0]) + 1
        for r in hostile_hub.requests("big.gguf")
        if r.range
    )
    assert fetched <= 16 << 20


# --------------------------------------------------------------------------- Also: 416


def test_a_416_to_a_resume_starts_the_file_over(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)

    def no_ranges(ex: Exchange) -> None:
        if ex.range is not None:
            ex.send(416, b"", {"Content-Range": "bytes */1"})
        else:
            ex.send(200, model_bytes)

    hostile_hub.on(rf"^/{REPO}/resolve/", no_ranges)
    listing = list_repo(REPO)
    partial = tmp_path / "m-Q4_0.gguf.part"
    partial.write_bytes(model_bytes[:1000])
    path = download(listing, listing.find("Q4_0"), to=tmp_path)
    assert path.read_bytes() == model_bytes
    assert not partial.exists()


# --------------------------------------------------------------------------- finding 11


def test_a_full_disk_mid_download_is_one_line_and_keeps_the_partial_file(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes
) -> None:
    _good_repo(hostile_hub, model_bytes)
    listing = list_repo(REPO)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(model_bytes) // 2, hard))
    try:
        with pytest.raises(DownloadError) as caught:
            download(listing, listing.find("Q4_0"), to=tmp_path, chunk_bytes=4096)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "\n" not in str(caught.value)
    assert "resume" in str(caught.value)
    assert (tmp_path / "m-Q4_0.gguf.part").exists()
    assert not (tmp_path / "m-Q4_0.gguf").exists()


def unwritable_folder(tmp_path: Path) -> Path:
    """Return a folder this process cannot write in (root ignores modes: use sysfs)."""
    if os.geteuid() == 0:
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("needs a read-only folder")
        return Path("/sys/kernel")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("kind", ["a file", "read-only"])
def test_downloading_to_a_file_or_a_read_only_folder_is_one_line(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes, kind: str
) -> None:
    _good_repo(hostile_hub, model_bytes)
    listing = list_repo(REPO)
    if kind == "a file":
        to = tmp_path / "file"
        to.write_text("mine")
    else:
        to = unwritable_folder(tmp_path)
    with pytest.raises(DownloadError) as caught:
        download(listing, listing.find("Q4_0"), to=to)
    assert "\n" not in str(caught.value)
    if kind == "a file":
        assert to.read_text() == "mine"


def test_read_models_survives_a_header_that_lies(
    hostile_hub: HostileHub, model_bytes: bytes
) -> None:
    lying = _claims_strings(1 << 29) + bytes(256)
    hostile_hub.serve_repo(
        REPO,
        commit=COMMIT,
        tree=[lfs_entry("m-Q4_0.gguf", lying)],
        blobs={"m-Q4_0.gguf": lying},
    )
    listing = list_repo(REPO)
    (model,) = read_models(listing, cache=False)
    assert model.model is None
    assert isinstance(model.error, GGTuneError)


def test_a_download_that_stalls_is_dropped_and_resumable(
    hostile_hub: HostileHub, tmp_path: Path, model_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.sources.hf

    _good_repo(hostile_hub, model_bytes)
    hostile_hub.on(rf"^/{REPO}/resolve/", lambda ex: ex.drip(model_bytes, 0.1))
    monkeypatch.setattr(app.sources.hf, "STALL_S", 0.5)
    listing = list_repo(REPO)
    with pytest.raises(RemoteError, match="stalled") as caught:
        download(listing, listing.find("Q4_0"), to=tmp_path, retries=0)
    assert "resume" in str(caught.value)
    assert (tmp_path / "m-Q4_0.gguf.part").exists()
