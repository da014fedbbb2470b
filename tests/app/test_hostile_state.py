"""Hostile state files: what ggtune and the runners keep on disk, made unusable for real.

A manifest that is a FIFO (opening it blocks forever), one linked to /dev/zero (reading it
never ends), JSON nested 100,000 levels deep, a pointer that is not UTF-8, a library file
with an empty folder entry or one that does not parse, a bandwidth cache holding null or
1e308, a profile nested too deep. Each must be skipped with a reason (a scan) or be one
line (a command), and nothing the user wrote may be dropped.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from app.errors import HardwareProfileError, StateFileError
from app.export.lmstudio import default_lmstudio_home
from app.hardware.bandwidth import host_bandwidth, machine_key
from app.hardware.host import probe_host
from app.hardware.profiles import builtin_profiles_dir, compose, load_profiles
from app.sources.library import (
    HeaderCache,
    LibraryRoots,
    add_folder,
    scan_library,
    user_folders,
)
from app.state_files import load_json, load_toml, read_text

DEEP = "[" * 100_000 + "]" * 100_000


def make_hostile(path: Path, kind: str) -> None:
    """Make ``path`` a hostile state file of ``kind`` ("missing" leaves it absent)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind in ("deep", "deep-json"):
        path.write_text(DEEP)
    elif kind == "big":
        path.write_bytes(b" " * 2000)
    elif kind == "not-utf8":
        path.write_bytes(b"\xff\xfe{}")
    elif kind == "folder":
        path.mkdir()
    else:
        assert kind == "missing", kind


def ollama_store(tmp_path: Path, gemma_path: Path) -> tuple[Path, Path]:
    """Return (models folder, manifests folder of library/demo) with one good tag."""
    models = tmp_path / "ollama"
    folder = models / "manifests" / "registry.ollama.ai" / "library" / "demo"
    folder.mkdir(parents=True)
    blob = models / "blobs" / ("sha256-" + "a" * 64)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(gemma_path)
    good = {
        "layers": [
            {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "a" * 64}
        ]
    }
    (folder / "good").write_text(json.dumps(good))
    return models, folder


def scan_within(roots: LibraryRoots, seconds: float = 20) -> object:
    """Scan on a thread; fail (instead of hanging the suite) if it takes over ``seconds``."""
    result: dict[str, object] = {}

    def work() -> None:
        result["library"] = scan_library(roots, cache=HeaderCache(None))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the scan still runs after {seconds} s"
    return result["library"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep-json", "not-utf8", "folder"])
def test_a_hostile_manifest_is_skipped_and_the_good_tag_listed(
    tmp_path: Path, gemma_path: Path, kind: str
) -> None:
    models, folder = ollama_store(tmp_path, gemma_path)
    bad = folder / "bad"
    make_hostile(bad, kind)
    library = scan_within(LibraryRoots(ollama_models=models))
    names = [e.name for e in library.entries]  # type: ignore[attr-defined]
    assert names == ["demo:good"]
    if kind != "folder":  # os.walk lists a folder as a folder, not as a tag
        issues = [i for i in library.issues if i.path == str(bad)]  # type: ignore[attr-defined]
        assert len(issues) == 1
        assert "\n" not in issues[0].message


@pytest.mark.parametrize("kind", ["dev-zero", "not-utf8", "fifo", "relative", "nul"])
def test_a_hostile_lmstudio_pointer_falls_back_to_the_default_home(
    tmp_path: Path, kind: str
) -> None:
    pointer = tmp_path / ".lmstudio-home-pointer"
    if kind == "dev-zero":
        pointer.symlink_to("/dev/zero")
    elif kind == "not-utf8":
        pointer.write_bytes(b"\xff\xfe/somewhere")
    elif kind == "fifo":
        os.mkfifo(pointer)
    elif kind == "relative":
        pointer.write_text("relative/path")
    else:
        pointer.write_bytes(b"/a\x00b")
    assert default_lmstudio_home(tmp_path) == tmp_path / ".lmstudio"


def test_a_good_lmstudio_pointer_is_followed(tmp_path: Path) -> None:
    (tmp_path / ".lmstudio-home-pointer").write_text(f"{tmp_path / 'elsewhere'}\n")
    assert default_lmstudio_home(tmp_path) == tmp_path / "elsewhere"


def test_an_empty_folder_entry_does_not_scan_the_current_folder(tmp_path: Path) -> None:
    config = tmp_path / "library.json"
    config.write_text(json.dumps({"folders": ["", "   ", "relative", str(tmp_path)]}))
    assert user_folders(config) == (tmp_path,)


@pytest.mark.parametrize("content", ["{not json", DEEP, '{"folders": 3}'])
def test_adding_a_folder_never_writes_over_a_library_file_it_cannot_read(
    tmp_path: Path, content: str
) -> None:
    config = tmp_path / "library.json"
    config.write_text(content)
    with pytest.raises(StateFileError, match="left as it is") as caught:
        add_folder(tmp_path, config)
    assert "\n" not in str(caught.value)
    assert config.read_text() == content


def test_a_header_cache_nested_too_deep_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "library-headers.json"
    path.write_text('{"version": 1, "entries": ' + DEEP + "}")
    cache = HeaderCache(path)
    cache.save()  # nothing changed: the bad file is left for the next save to replace
    assert path.read_text().startswith('{"version": 1, "entries": [[[')


@pytest.mark.parametrize("value", [None, "fast", [1, 2], 1e308, -3, float("nan"), True], ids=repr)
def test_a_bandwidth_cache_with_a_bad_value_is_measured_again(
    tmp_path: Path, value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.hardware.bandwidth as bandwidth

    host = probe_host()
    key = machine_key(host)
    entry = {
        "gb_per_s": value,
        "array_bytes": 1,
        "runs": 1,
        "threads": 1,
        "measured_at": "x",
        "machine_key": key,
    }
    path = tmp_path / "hardware" / "host-bandwidth.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "machines": {key: entry}}))
    monkeypatch.setattr(bandwidth, "measure_host_bandwidth", lambda: (12.5, 1 << 20, 1, 1))
    got = host_bandwidth(host, cache_dir=tmp_path)
    assert got is not None
    assert got.gb_per_s == 12.5
    assert not got.cached


def test_a_bandwidth_cache_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    host = probe_host()
    path = tmp_path / "hardware" / "host-bandwidth.json"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    assert host_bandwidth(host, cache_dir=tmp_path, measure=False) is None


def _user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "config" / "ggtune" / "profiles"
    folder.mkdir(parents=True)
    return folder


def test_one_broken_user_profile_does_not_block_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _user_profiles(tmp_path, monkeypatch)
    (folder / "deep.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (folder / "broken.toml").write_text('[[profile]]\nid = "x"\n')
    profiles = load_profiles()
    assert profiles.get("rtx-4090").id == "rtx-4090"
    assert sorted(Path(str(e.path)).name for e in profiles.issues) == ["broken.toml", "deep.toml"]
    assert all("\n" not in str(e) for e in profiles.issues)
    with pytest.raises(HardwareProfileError, match="could not be read"):
        profiles.get("my-missing-box")


@pytest.mark.parametrize(
    "text",
    [
        "100000000x rtx-4090",
        "17x rtx-4090",
        "9x rtx-4090 + 9x rtx-3090",
        "9" * 5000 + "x rtx-4090",
        "1" + "0" * 400 + " GB",
    ],
)
def test_an_impossible_composition_is_one_line_at_once(text: str) -> None:
    profiles = load_profiles([builtin_profiles_dir()])
    with pytest.raises(HardwareProfileError) as caught:
        compose(text, profiles=profiles)
    assert "\n" not in str(caught.value)


def test_sixteen_gpus_still_compose() -> None:
    hardware = compose("16x rtx-4090", profiles=load_profiles([builtin_profiles_dir()]))
    assert len(hardware.gpus) == 16


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "deep", "big", "not-utf8", "missing"])
def test_state_file_readers_refuse_with_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state"
    make_hostile(path, kind)
    for reader in (load_json, load_toml, read_text):
        with pytest.raises(StateFileError) as caught:
            reader(path, max_bytes=1000)
        assert str(caught.value).startswith(f"{path}: ")
        assert "\n" not in str(caught.value)
