"""Hugging Face repos through a local fake hub (tests/fake_hub.py) reached via HF_ENDPOINT.

The fake repo holds the two real demo models under quant-style names, a split model
written with gguf's writer as 2 shards (in a subfolder, so the tree must be recursive), a
vision projector and a split model with a shard missing; the tree comes in pages of 3.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from app.errors import (
    DownloadCancelledError,
    DownloadError,
    RemoteAuthError,
    RemoteNotFoundError,
    RemoteUnavailableError,
)
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.sources.demo_models import GEMMA, SMOLLM
from app.sources.hf import (
    DownloadProgress,
    RepoListing,
    download,
    list_repo,
    quant_label,
    read_models,
    read_url_model,
)
from app.sources.library import LibraryRoots, scan_library
from app.sources.refs import RepoRef, parse_repo
from tests.fake_hub import (
    COMMIT,
    REPO,
    FakeHub,
    Served,
)


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("org/m-GGUF", RepoRef("org/m-GGUF")),
        ("org/m-GGUF:Q4_K_M", RepoRef("org/m-GGUF", "main", "Q4_K_M")),
        ("org/m-GGUF@v2:m.gguf", RepoRef("org/m-GGUF", "v2", "m.gguf")),
        ("hf.co/org/m-GGUF:IQ4_XS", RepoRef("org/m-GGUF", "main", "IQ4_XS")),
        ("https://huggingface.co/org/m-GGUF", RepoRef("org/m-GGUF")),
        ("https://huggingface.co/org/m-GGUF/tree/dev", RepoRef("org/m-GGUF", "dev")),
        (
            "https://hf.co/org/m-GGUF/blob/main/Q8_0/m-00001-of-00002.gguf",
            RepoRef("org/m-GGUF", "main", "Q8_0/m-00001-of-00002.gguf"),
        ),
        (
            "https://huggingface.co/org/m-GGUF/resolve/abc123/m-Q4_0.gguf?download=true",
            RepoRef("org/m-GGUF", "abc123", "m-Q4_0.gguf"),
        ),
    ],
)
def test_parse_repo(text: str, ref: RepoRef) -> None:
    assert parse_repo(text) == ref


def test_parse_repo_refuses_non_repos() -> None:
    with pytest.raises(RemoteNotFoundError, match="not a Hugging Face repo"):
        parse_repo("just-a-name")


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"),
        ("model.q8_0.gguf", "Q8_0"),
        ("gemma-3-27b-it-IQ4_XS.gguf", "IQ4_XS"),
        ("Llama-3.3-70B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"),
        ("Q4_K_M/DeepSeek-R1-Q4_K_M-00001-of-00009.gguf", "Q4_K_M"),
        ("BF16/model-BF16-00001-of-00002.gguf", "BF16"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("tinyllama-1.1b-fp16.gguf", "F16"),
        ("Q3_K_S/model-00001-of-00002.gguf", "Q3_K_S"),
        ("model.gguf", ""),
    ],
)
def test_quant_label(name: str, label: str) -> None:
    assert quant_label(name) == label


def test_list_repo_groups_quants_and_joins_shards(hub: FakeHub) -> None:
    listing = list_repo(REPO)
    assert listing.commit == COMMIT
    assert [(m.quant, len(m.files)) for m in listing.models] == [
        ("Q8_0", 2),
        ("Q4_1", 1),
        ("Q4_K_M", 1),
    ]
    q4km = listing.find("Q4_K_M")
    assert q4km.size_bytes == GEMMA.size_bytes
    assert q4km.files[0].sha256 == GEMMA.sha256
    assert listing.find("demo-Q8_0-00002-of-00002.gguf").name == (
        "Q8_0/demo-Q8_0-00001-of-00002.gguf"
    )
    assert [f.path for f in listing.extras] == ["mmproj-demo-F16.gguf"]
    assert listing.issues == (
        "broken/demo-IQ2_XS: split model is missing shard(s) 00002-of-00003, 00003-of-00003",
    )
    assert set(listing.by_quant()) == {"Q8_0", "Q4_1", "Q4_K_M"}
    # Paginated like the hub: several tree pages, followed through the Link header.
    assert len(hub.requests("/tree/")) > 2
    with pytest.raises(RemoteNotFoundError, match=r"no file or quant 'Q5_K_M'.*Q4_1, Q4_K_M"):
        listing.find("Q5_K_M")


def test_unknown_repo_and_revision(hub: FakeHub) -> None:
    with pytest.raises(RemoteNotFoundError, match="no such repository"):
        list_repo("ggtune-test/nope")
    with pytest.raises(RemoteNotFoundError, match="no such revision"):
        list_repo(f"{REPO}@v9")


def test_read_models_matches_local_specs(
    hub: FakeHub, gemma_path: Path, split_shards: list[Path]
) -> None:
    listing = list_repo(REPO)
    hub.clear()
    models = read_models(listing)
    assert [m.error for m in models] == [None, None, None]
    by_quant = {m.entry.quant: m.model for m in models}
    assert by_quant["Q4_K_M"] is not None
    remote = model_spec(by_quant["Q4_K_M"])
    local = model_spec(read_model(gemma_path))
    assert (remote.n_params, remote.weights_bytes, remote.n_layer) == (
        local.n_params,
        local.weights_bytes,
        local.n_layer,
    )
    assert by_quant["Q8_0"] is not None
    assert len(by_quant["Q8_0"].shards) == 2
    assert model_spec(by_quant["Q8_0"]).n_params == model_spec(read_model(split_shards[0])).n_params
    # Headers only: far below the 350 MB the files hold.
    assert hub.sent("/cdn/") < 20 * 2**20
    # A second look is served from the header cache: no request at all.
    hub.clear()
    again = read_models(listing)
    assert [m.error for m in again] == [None, None, None]
    assert hub.requests() == []


def test_size_hint_reads_other_headers_in_one_request(hub: FakeHub) -> None:
    listing = list_repo(REPO)
    hub.clear()
    read_models(listing, [listing.find("Q4_1"), listing.find("Q4_K_M")], max_workers=1)
    # Q4_1 (first, 1.7 MB header): 1 + 2 MiB; Q4_K_M sized from it: gemma's header is
    # larger (6.5 MB), so it needs more than one, but far fewer than 1 MiB steps would.
    assert len(hub.requests(f"/cdn/{SMOLLM.sha256}")) == 2
    assert len(hub.requests(f"/cdn/{GEMMA.sha256}")) <= 3


def test_gated_repo_needs_a_token(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = list_repo("ggtune-test/gated-GGUF")  # listing a gated repo is public
    (result,) = read_models(listing, cache=False)
    assert isinstance(result.error, RemoteAuthError)
    assert "gated repository" in str(result.error)
    assert "huggingface-cli login" in str(result.error)
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    hub.clear()
    (result,) = read_models(listing, cache=False)
    assert result.error is None
    # The token went to the hub's host, never along the redirect to the CDN host.
    assert {e.auth for e in hub.requests("/resolve/")} == {"Bearer hf_good"}
    assert hub.requests("/cdn/")
    assert {e.auth for e in hub.requests("/cdn/")} == {None}


def test_download_into_the_hf_cache_resumes_and_checks(hub: FakeHub, tmp_path: Path) -> None:
    listing = list_repo(REPO)
    entry = listing.find("Q4_1")
    cdn = f"/cdn/{SMOLLM.sha256}"
    hub.cut_after[cdn] = 30_000_000
    with pytest.raises(RemoteUnavailableError, match="closed after 30,000,000 of"):
        download(listing, entry, retries=0)
    storage = tmp_path / "hf" / "hub" / "models--ggtune-test--demo-GGUF"
    blob = storage / "blobs" / SMOLLM.sha256
    partial = blob.with_name(blob.name + ".incomplete")
    assert partial.stat().st_size == 30_000_000
    assert not blob.exists()
    assert not (storage / "snapshots" / COMMIT / "demo-Q4_1.gguf").exists()

    hub.clear()
    seen: list[DownloadProgress] = []
    path = download(listing, entry, progress=seen.append)
    assert [e.range for e in hub.requests(cdn)] == ["bytes=30000000-"]
    assert hub.sent(cdn) == SMOLLM.size_bytes - 30_000_000
    assert path == storage / "snapshots" / COMMIT / "demo-Q4_1.gguf"
    assert path.is_symlink()
    assert path.resolve() == blob
    assert not partial.exists()
    assert (storage / "refs" / "main").read_text() == COMMIT
    assert seen[0].stage == "checking"
    assert seen[-1].done_bytes == seen[-1].total_bytes == SMOLLM.size_bytes
    assert seen[-1].stage == "done"
    # The model now shows up in the library, as huggingface_hub's own downloads do.
    library = scan_library(LibraryRoots(huggingface_hub=tmp_path / "hf" / "hub"))
    assert [e.source for e in library.entries] == ["huggingface"]
    # Downloading again finds it complete: no request.
    hub.clear()
    assert download(listing, entry) == path
    assert hub.requests() == []


def test_download_retries_a_cut_connection(hub: FakeHub, tmp_path: Path) -> None:
    listing = list_repo(REPO)
    hub.cut_after[f"/cdn/{SMOLLM.sha256}"] = 5_000_000
    path = download(listing, listing.find("Q4_1"), to=tmp_path / "models")
    assert path == tmp_path / "models" / "demo-Q4_1.gguf"
    assert path.stat().st_size == SMOLLM.size_bytes
    assert os.listdir(tmp_path / "models") == ["demo-Q4_1.gguf"]


def test_download_split_model_into_a_folder(
    hub: FakeHub, tmp_path: Path, split_shards: list[Path]
) -> None:
    listing = list_repo(REPO)
    path = download(listing, listing.find("Q8_0"), to=tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == [
        "demo-Q8_0-00001-of-00002.gguf",
        "demo-Q8_0-00002-of-00002.gguf",
    ]
    assert path.read_bytes() == split_shards[0].read_bytes()
    assert len(read_model(path).shards) == 2


def test_checksum_mismatch_leaves_nothing(hub: FakeHub, smollm_path: Path, tmp_path: Path) -> None:
    bad = Served(smollm_path, "0" * 64, SMOLLM.size_bytes)
    hub.repos[REPO].files["demo-Q4_1.gguf"] = bad
    listing = list_repo(REPO)
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download(listing, listing.find("Q4_1"), to=tmp_path / "out")
    assert os.listdir(tmp_path / "out") == []


def test_cancel_keeps_the_partial_file(hub: FakeHub, tmp_path: Path) -> None:
    listing = list_repo(REPO)
    cancel = threading.Event()

    def on_progress(p: DownloadProgress) -> None:
        if p.done_bytes > 0:
            cancel.set()

    with pytest.raises(DownloadCancelledError, match="run the download again to resume"):
        download(listing, listing.find("Q4_1"), to=tmp_path, progress=on_progress, cancel=cancel)
    assert sorted(os.listdir(tmp_path)) == ["demo-Q4_1.gguf.part"]


def test_free_disk_is_checked_first(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = list_repo(REPO)
    hub.clear()
    monkeypatch.setattr(
        "app.sources.hf.shutil.disk_usage", lambda _: shutil._ntuple_diskusage(10**12, 10**12, 0)
    )
    with pytest.raises(DownloadError, match=r"needs 0.24 GiB more, but .* has 0.00 GiB free"):
        download(listing, listing.find("Q4_K_M"), to=tmp_path / "new" / "dir")
    assert hub.requests() == []
    assert not (tmp_path / "new").exists()


def test_read_url_model_blob_url_and_split_siblings(hub: FakeHub) -> None:
    blob = f"{hub.endpoint}/{REPO}/blob/main/Q8_0/demo-Q8_0-00002-of-00002.gguf"
    model = read_url_model(blob, cache=False)
    assert len(model.shards) == 2
    assert model.path.endswith("/resolve/main/Q8_0/demo-Q8_0-00001-of-00002.gguf")


def test_listing_find_ambiguous() -> None:
    from app.sources.hf import HubFile, ModelEntry

    a = ModelEntry("a-Q4_0.gguf", "Q4_0", (HubFile("a-Q4_0.gguf", 1, None, "x"),))
    b = ModelEntry("b/a-Q4_0.gguf", "Q4_0", (HubFile("b/a-Q4_0.gguf", 1, None, "y"),))
    listing = RepoListing("o/r", "main", COMMIT, "http://x", (a, b))
    with pytest.raises(RemoteNotFoundError, match="names 2 files"):
        listing.find("q4_0")
    assert listing.find("b/a-Q4_0.gguf") is b


def test_fake_hub_speaks_huggingface_hub(hub: FakeHub, tmp_path: Path) -> None:
    """The real huggingface_hub client reads the fake hub: its shapes are the hub's.

    Skipped where huggingface_hub is not installed (it is not a dependency of ggtune).
    """
    hf_api = pytest.importorskip("huggingface_hub")
    api = hf_api.HfApi(endpoint=hub.endpoint, token=False)
    tree = list(api.list_repo_tree(REPO, recursive=True))
    files = {f.path: f for f in tree if isinstance(f, hf_api.hf_api.RepoFile)}
    assert files["demo-Q4_1.gguf"].lfs.sha256 == SMOLLM.sha256
    assert files["demo-Q4_1.gguf"].size == SMOLLM.size_bytes
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == COMMIT
    mine = list_repo(REPO)
    assert {f.path for m in mine.models for f in m.files} <= set(files)
    path = hf_api.hf_hub_download(
        REPO,
        "Q8_0/demo-Q8_0-00001-of-00002.gguf",
        cache_dir=tmp_path / "hfcache",
        endpoint=hub.endpoint,
        token=False,
    )
    assert (
        Path(path).read_bytes()
        == Path(hub.repos[REPO].files["Q8_0/demo-Q8_0-00001-of-00002.gguf"].local).read_bytes()
    )
    with pytest.raises(hf_api.errors.GatedRepoError):
        hf_api.hf_hub_download(
            "ggtune-test/gated-GGUF",
            "m-Q4_1.gguf",
            cache_dir=tmp_path / "hfcache",
            endpoint=hub.endpoint,
            token=False,
        )
