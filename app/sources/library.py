"""The user's model library: every GGUF model already on this machine.

Where models are found (each root may be missing; nothing here downloads anything):

- **Ollama**: ``$OLLAMA_MODELS`` or ``~/.ollama/models``. Each
  ``manifests/<registry>/<namespace>/<model>/<tag>`` is a JSON manifest; its layer with
  ``mediaType`` ``application/vnd.ollama.image.model`` names the GGUF blob
  ``blobs/sha256-<hex>`` (ollama ``manifest/paths.go`` ``BlobsPath``). Shown as Ollama
  shows it (``types/model/name.go`` ``DisplayShortest``): ``model:tag``, with the
  namespace unless it is ``library`` and the registry unless it is ``registry.ollama.ai``.
- **LM Studio**: ``<home>/models/<publisher>/<repo>/<file>.gguf`` where home is
  ``~/.lmstudio`` (or the folder named in ``~/.lmstudio-home-pointer``), and the older
  ``~/.cache/lm-studio/models``.
- **Hugging Face cache**: ``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
  ``~/.cache/huggingface/hub``, laid out as ``models--<org>--<name>/snapshots/<revision>/
  <file>`` (symlinks into ``blobs/``), as huggingface_hub documents its cache.
- **Folders the user adds** (:func:`add_folder`, kept in the user config folder), and
  **the demo models** in ggtune's own models folder.

A split model's shards (``name-00001-of-00003.gguf``) are one entry. Two entries on the
same file (a hard link, a symlink, two Ollama tags of one blob, two snapshots of one
Hugging Face blob) are recognised by device and inode: the later one names the first in
``duplicate_of``. Only headers are read, and what they say is cached by path, size and
mtime in ``<cache>/library-headers.json``, so a second scan reads no model file. A folder
that cannot be read, a broken manifest or a file that is not a GGUF becomes a
:class:`LibraryIssue`; scanning never fails because of one.

Example::

    library = scan_library()
    for entry in library.entries:
        print(entry.source, entry.name, entry.size_bytes, entry.architecture)
    for issue in library.issues:
        print("skipped", issue.path, issue.message)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from app.errors import GGTuneError, StateFileError
from app.export.common import write_text_atomic
from app.export.lmstudio import default_lmstudio_home
from app.hardware.probe import local_hardware
from app.model.gguf_reader import read_header, read_model
from app.model.spec import model_spec
from app.paths import cache_dir
from app.predict.estimate import estimate
from app.settings import ALL_LAYERS, runner_defaults
from app.sources.demo_models import models_dir
from app.sources.ollama_api import RunningModel
from app.state_files import load_json

if TYPE_CHECKING:
    from app.hardware.devices import Hardware

__all__ = [
    "HeaderCache",
    "Library",
    "LibraryEntry",
    "LibraryIssue",
    "LibraryRoots",
    "OllamaComparison",
    "add_folder",
    "compare_with_ollama",
    "default_roots",
    "library_config_path",
    "scan_library",
    "user_folders",
]

Source = Literal["ollama", "lmstudio", "huggingface", "folder", "demo"]

OLLAMA_MODEL_MEDIA_TYPE: Final = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_CACHE_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class LibraryEntry:
    """One model on disk.

    ``path`` is the file to open (the first shard of a split model), ``files`` every file
    of it; ``size_bytes`` their total size. ``architecture``, ``model_name`` (the GGUF's
    ``general.name``) and ``context_length`` (training, tokens) come from the header.
    ``kind`` is ``"projector"`` for vision/audio projectors (``clip``/``mmproj``), else
    ``"model"``. ``duplicate_of`` names the entry already listed for the same file.
    """

    name: str
    source: Source
    path: str
    files: tuple[str, ...]
    size_bytes: int
    architecture: str | None = None
    model_name: str | None = None
    context_length: int | None = None
    kind: Literal["model", "projector"] = "model"
    duplicate_of: str | None = None
    file_id: tuple[int, int] = (0, 0)


@dataclass(frozen=True, slots=True)
class LibraryIssue:
    """Something skipped while scanning, with the reason in plain words."""

    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Library:
    """Everything found: entries in scan order, and the issues met on the way."""

    entries: tuple[LibraryEntry, ...]
    issues: tuple[LibraryIssue, ...] = ()

    def find(self, name_or_path: str) -> LibraryEntry | None:
        """Return the entry with this name or path (first match), or None."""
        for entry in self.entries:
            if name_or_path in (entry.name, entry.path):
                return entry
        return None


@dataclass(frozen=True, slots=True)
class LibraryRoots:
    """Where to look. ``None`` or an empty tuple skips that kind of store."""

    ollama_models: Path | None = None
    lmstudio_models: tuple[Path, ...] = ()
    huggingface_hub: Path | None = None
    folders: tuple[Path, ...] = ()
    demo_models: Path | None = None


def default_roots(
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    *,
    config_path: Path | None = None,
) -> LibraryRoots:
    """Return this machine's stores, as each runner locates its own."""

    env = os.environ if env is None else env
    home = home or Path.home()
    ollama = env.get("OLLAMA_MODELS", "").strip().strip("\"'")
    hf = env.get("HF_HUB_CACHE") or (
        str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else None
    )
    return LibraryRoots(
        ollama_models=Path(ollama).expanduser() if ollama else home / ".ollama" / "models",
        lmstudio_models=(
            default_lmstudio_home(home) / "models",
            home / ".cache" / "lm-studio" / "models",
        ),
        huggingface_hub=Path(hf).expanduser() if hf else home / ".cache" / "huggingface" / "hub",
        folders=user_folders(config_path),
        demo_models=models_dir(),
    )


# --------------------------------------------------------------------------- user folders


def library_config_path() -> Path:
    """Return ``<user config dir>/library.json`` (``~/.config/ggtune`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("ggtune", appauthor=False)) / "library.json"


def user_folders(config_path: Path | None = None, *, strict: bool = False) -> tuple[Path, ...]:
    """Return the folders the user added, absolute paths only.

    A missing file means none. A file that cannot be used (not JSON, not a regular file,
    nested too deep) means none too, unless ``strict``: then it raises
    :class:`~app.errors.StateFileError`, so a change never writes over it. Entries that are
    not absolute paths (``""`` would scan the current folder) are left out.
    """
    path = config_path or library_config_path()
    if not os.path.lexists(path):
        return ()
    try:
        data = load_json(path, max_bytes=1 << 20)
    except StateFileError:
        if strict:
            raise
        return ()
    folders = data.get("folders") if isinstance(data, dict) else None
    if not isinstance(folders, list):
        if strict:
            raise StateFileError('not a library file (no "folders" list)', path=path)
        return ()
    return tuple(Path(f) for f in folders if isinstance(f, str) and f.strip() and os.path.isabs(f))


def add_folder(folder: str | os.PathLike[str], config_path: Path | None = None) -> Path:
    """Add ``folder`` to the library's folders (stored atomically); return it, absolute.

    Raise :class:`~app.errors.GGTuneError` if it is not an existing folder, and
    :class:`~app.errors.StateFileError` if the library file exists but cannot be read
    (it is left as it is, with the user's folders in it).
    """

    target = Path(folder).expanduser().resolve()
    if not target.is_dir():
        raise GGTuneError(f"{folder}: not a folder")
    path = config_path or library_config_path()
    try:
        current = [str(p) for p in user_folders(path, strict=True)]
    except StateFileError as err:
        raise StateFileError(
            f"{err.message}; it was left as it is: fix or remove it, then add again", path=err.path
        ) from None
    if str(target) not in current:
        current.append(str(target))
    text = json.dumps({"folders": current}, indent=2) + "\n"
    write_text_atomic(path, text, overwrite=True, make_parents=True)
    return target


# --------------------------------------------------------------------------- header cache


@dataclass(frozen=True, slots=True)
class _HeaderFacts:
    architecture: str | None
    model_name: str | None
    context_length: int | None
    split_count: int
    general_type: str | None


class HeaderCache:
    """What each GGUF header said, keyed by path, size and mtime, kept in one JSON file.

    ``path=None`` keeps it in memory only. :meth:`save` writes it atomically (errors
    ignored: a cache that cannot be saved only costs time).
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, dict[str, object]] = {}
        self._dirty = False
        self.reads = 0  # headers actually read from model files (for tests and stats)
        if path is not None and os.path.lexists(path):
            try:
                data = load_json(path, max_bytes=64 << 20)
            except StateFileError:
                data = None  # a damaged cache only costs time: headers are read again
            if isinstance(data, dict) and data.get("version") == _CACHE_VERSION:
                entries = data.get("entries")
                if isinstance(entries, dict):
                    self._entries = {
                        k: v
                        for k, v in entries.items()
                        if isinstance(k, str) and isinstance(v, dict)
                    }

    @staticmethod
    def default_path() -> Path:
        """Return ``<user cache dir>/library-headers.json``."""

        return cache_dir() / "library-headers.json"

    def facts(self, path: str, st: os.stat_result) -> _HeaderFacts:
        """Return the header facts of ``path``; read the header only on a cache miss."""
        key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
        hit = self._entries.get(key)
        if hit is not None:
            return _facts_from_json(hit)
        facts = _read_facts(path)
        self.reads += 1
        self._entries[key] = {
            "architecture": facts.architecture,
            "model_name": facts.model_name,
            "context_length": facts.context_length,
            "split_count": facts.split_count,
            "general_type": facts.general_type,
        }
        self._dirty = True
        return facts

    def save(self) -> None:
        """Write the cache if anything changed (atomically; errors are ignored)."""
        if self.path is None or not self._dirty:
            return

        text = json.dumps({"version": _CACHE_VERSION, "entries": self._entries})
        try:
            write_text_atomic(self.path, text, overwrite=True, make_parents=True)
        except GGTuneError:
            return
        self._dirty = False


def _facts_from_json(d: Mapping[str, object]) -> _HeaderFacts:
    def s(key: str) -> str | None:
        v = d.get(key)
        return v if isinstance(v, str) else None

    ctx = d.get("context_length")
    split = d.get("split_count")
    return _HeaderFacts(
        architecture=s("architecture"),
        model_name=s("model_name"),
        context_length=ctx if isinstance(ctx, int) else None,
        split_count=split if isinstance(split, int) else 0,
        general_type=s("general_type"),
    )


def _read_facts(path: str) -> _HeaderFacts:

    header = read_header(path, max_inline_array=0)
    arch = header.get("general.architecture")
    arch_s = arch if isinstance(arch, str) else None
    ctx = header.get(f"{arch_s}.context_length") if arch_s else None
    name = header.get("general.name")
    split = header.get("split.count")
    gtype = header.get("general.type")
    return _HeaderFacts(
        architecture=arch_s,
        model_name=name if isinstance(name, str) else None,
        context_length=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None,
        split_count=split if isinstance(split, int) and not isinstance(split, bool) else 0,
        general_type=gtype if isinstance(gtype, str) else None,
    )


# --------------------------------------------------------------------------- scanning


@dataclass
class _Scan:
    cache: HeaderCache
    entries: list[LibraryEntry] = field(default_factory=list)
    issues: list[LibraryIssue] = field(default_factory=list)
    seen_ids: dict[tuple[int, int], str] = field(default_factory=dict)

    def issue(self, path: str | os.PathLike[str], message: str) -> None:
        self.issues.append(LibraryIssue(os.fspath(path), message))

    def add(self, name: str, source: Source, files: list[str]) -> None:
        """Read the first file's header and add an entry (or an issue)."""
        first = files[0]
        try:
            stats = [os.stat(f) for f in files]
        except OSError as err:
            self.issue(first, f"cannot read: {err.strerror or err}")
            return
        try:
            facts = self.cache.facts(first, stats[0])
        except GGTuneError as err:
            who = f"{name}: " if source == "ollama" else ""  # a blob's name says nothing
            self.issue(first, f"{who}not a usable GGUF: {err}")
            return
        except OSError as err:
            self.issue(first, f"cannot read: {err.strerror or err}")
            return
        file_id = (stats[0].st_dev, stats[0].st_ino)
        kind: Literal["model", "projector"] = (
            "projector"
            if facts.architecture == "clip" or facts.general_type == "mmproj"
            else "model"
        )
        entry = LibraryEntry(
            name=name,
            source=source,
            path=first,
            files=tuple(files),
            size_bytes=sum(st.st_size for st in stats),
            architecture=facts.architecture,
            model_name=facts.model_name,
            context_length=facts.context_length,
            kind=kind,
            file_id=file_id,
        )
        first_seen = self.seen_ids.get(file_id)
        if first_seen is not None:
            entry = replace(entry, duplicate_of=first_seen)
        else:
            self.seen_ids[file_id] = name
        self.entries.append(entry)


def _walk_ggufs(scan: _Scan, root: Path) -> Iterator[tuple[str, list[str]]]:
    """Yield (first file, all files) for every GGUF model under ``root``, shards grouped."""

    def on_error(err: OSError) -> None:
        scan.issue(err.filename or root, f"cannot read the folder: {err.strerror or err}")

    for folder, dirs, names in os.walk(root, onerror=on_error):
        dirs.sort()
        yield from _group_shards(scan, folder, sorted(n for n in names if n.endswith(".gguf")))


def _group_shards(scan: _Scan, folder: str, names: list[str]) -> Iterator[tuple[str, list[str]]]:
    groups: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    for n in names:
        m = _SHARD.match(n)
        if m is None:
            yield os.path.join(folder, n), [os.path.join(folder, n)]
            continue
        key = f"{m['prefix']}|{m['count']}"
        groups.setdefault(key, {})[int(m["no"])] = n
        counts[key] = int(m["count"])
    for key, shards in groups.items():
        count = counts[key]
        missing = [i for i in range(1, count + 1) if i not in shards]
        first_name = shards.get(1) or next(iter(shards.values()))
        if missing:
            scan.issue(
                os.path.join(folder, first_name),
                f"split model is missing {len(missing)} of {count} shards "
                f"({', '.join(f'{i:05d}' for i in missing[:5])})",
            )
            continue
        files = [os.path.join(folder, shards[i]) for i in range(1, count + 1)]
        yield files[0], files


def _scan_ollama(scan: _Scan, models: Path) -> None:
    manifests = models / "manifests"
    if not manifests.is_dir():
        return

    def on_error(err: OSError) -> None:
        scan.issue(err.filename or manifests, f"cannot read the folder: {err.strerror or err}")

    for folder, dirs, names in os.walk(manifests, onerror=on_error):
        dirs.sort()
        rel = Path(folder).relative_to(manifests).parts
        if len(rel) != 3:
            continue
        registry, namespace, model = rel
        for tag in sorted(names):
            path = Path(folder) / tag
            name = _ollama_display_name(registry, namespace, model, tag)
            blob = _ollama_model_blob(scan, path, models)
            if blob is not None:
                scan.add(name, "ollama", [str(blob)])


def _ollama_display_name(registry: str, namespace: str, model: str, tag: str) -> str:
    if registry.lower() != "registry.ollama.ai":
        return f"{registry}/{namespace}/{model}:{tag}"
    if namespace.lower() != "library":
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def _ollama_model_blob(scan: _Scan, manifest: Path, models: Path) -> Path | None:
    try:
        data = load_json(manifest, max_bytes=1 << 20)
    except StateFileError as err:
        scan.issue(manifest, f"broken manifest: {err.message}")
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        scan.issue(manifest, "broken manifest: no layers list")
        return None
    layer = next(
        (
            x
            for x in layers
            if isinstance(x, dict) and x.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE
        ),
        None,
    )
    if layer is None:
        scan.issue(manifest, f"no {OLLAMA_MODEL_MEDIA_TYPE} layer (not a GGUF model)")
        return None
    digest = layer.get("digest")
    m = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if m is None:
        scan.issue(manifest, f"broken manifest: model layer digest {digest!r} is not sha256")
        return None
    blob = models / "blobs" / f"sha256-{m[1]}"
    if not blob.is_file():
        scan.issue(manifest, f"the model blob {blob.name} is missing")
        return None
    return blob


def _scan_lmstudio(scan: _Scan, models: Path) -> None:
    if not models.is_dir():
        return
    for first, files in _walk_ggufs(scan, models):
        rel = Path(first).relative_to(models).as_posix()
        scan.add(rel, "lmstudio", files)


def _scan_huggingface(scan: _Scan, hub: Path) -> None:
    if not hub.is_dir():
        return
    try:
        repos = sorted(p for p in hub.iterdir() if p.name.startswith("models--"))
    except OSError as err:
        scan.issue(hub, f"cannot read the folder: {err.strerror or err}")
        return
    for repo in repos:
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        try:
            revisions = sorted(snapshots.iterdir())
        except OSError as err:
            scan.issue(snapshots, f"cannot read the folder: {err.strerror or err}")
            continue
        for rev in revisions:
            for first, files in _walk_ggufs(scan, rev):
                rel = Path(first).relative_to(rev).as_posix()
                scan.add(f"{repo_id}/{rel}@{rev.name[:8]}", "huggingface", files)


def _scan_folder(scan: _Scan, folder: Path) -> None:
    if not folder.is_dir():
        scan.issue(folder, "added folder is missing")
        return
    for first, files in _walk_ggufs(scan, folder):
        scan.add(str(Path(first)), "folder", files)


def scan_library(
    roots: LibraryRoots | None = None,
    *,
    cache: HeaderCache | None = None,
) -> Library:
    """Find every GGUF model in ``roots`` (default: :func:`default_roots`).

    Reads only headers, through ``cache`` (default: the one in the user cache folder,
    saved afterwards). Never raises for what it finds: problems become issues.
    """
    roots = roots or default_roots()
    own_cache = cache is None
    cache = cache or HeaderCache(HeaderCache.default_path())
    scan = _Scan(cache)
    if roots.demo_models is not None:
        _guarded(scan, _scan_demo, roots.demo_models)
    if roots.ollama_models is not None:
        _guarded(scan, _scan_ollama, roots.ollama_models)
    for lms in roots.lmstudio_models:
        _guarded(scan, _scan_lmstudio, lms)
    if roots.huggingface_hub is not None:
        _guarded(scan, _scan_huggingface, roots.huggingface_hub)
    for folder in roots.folders:
        _guarded(scan, _scan_folder, folder)
    if own_cache:
        cache.save()
    return Library(entries=tuple(scan.entries), issues=tuple(scan.issues))


def _guarded(scan: _Scan, step: Callable[[_Scan, Path], None], root: Path) -> None:
    try:
        step(scan, root)
    except OSError as err:  # a store vanished or became unreadable mid-scan
        scan.issue(err.filename or root, f"cannot read: {err.strerror or err}")


def _scan_demo(scan: _Scan, folder: Path) -> None:
    if not folder.is_dir():
        return
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".gguf"))
    except OSError as err:
        scan.issue(folder, f"cannot read the folder: {err.strerror or err}")
        return
    for first, files in _group_shards(scan, str(folder), names):
        scan.add(Path(first).name, "demo", files)


def entries_as_dicts(entries: Iterable[LibraryEntry]) -> list[dict[str, object]]:
    """Return entries as plain data (what ``ggtune library --json`` prints)."""
    return [
        {
            "name": e.name,
            "source": e.source,
            "path": e.path,
            "files": list(e.files),
            "size_bytes": e.size_bytes,
            "architecture": e.architecture,
            "model_name": e.model_name,
            "context_length": e.context_length,
            "kind": e.kind,
            "duplicate_of": e.duplicate_of,
        }
        for e in entries
    ]


# --------------------------------------------------------------------------- Ollama, live


@dataclass(frozen=True, slots=True)
class OllamaComparison:
    """What Ollama did with a loaded model beside ggtune's estimate for the same settings.

    Bytes throughout; ``ollama_*`` from ``/api/ps``, ``ggtune_*`` from
    :func:`~app.predict.estimate.estimate` with Ollama's settings (``context_length`` per slot ×
    ``num_parallel``, ``num_batch`` and ``num_gpu`` from ``/api/show`` when given).
    """

    name: str
    context_length: int | None
    num_parallel: int
    ollama_total_bytes: int
    ollama_vram_bytes: int
    ggtune_total_bytes: int
    ggtune_gpu_bytes: int
    settings: object


def compare_with_ollama(
    running: RunningModel,
    model_path: str,
    *,
    num_parallel: int = 1,
    kv_cache_type: str = "f16",
    parameters: Mapping[str, tuple[str, ...]] | None = None,
    hardware: Hardware | None = None,
) -> OllamaComparison:
    """Estimate ``model_path`` with the settings Ollama used for ``running``."""

    hw = hardware or local_hardware()
    spec = model_spec(read_model(model_path))
    gpu_total = sum(g.capacity_bytes or 0 for g in hw.gpus)
    base = runner_defaults("ollama", gpu_total_bytes=gpu_total)
    per_slot = running.context_length or base.n_ctx
    changes: dict[str, object] = {
        "n_ctx": per_slot * num_parallel,
        "n_parallel": num_parallel,
        "cache_type_k": kv_cache_type,
        "cache_type_v": kv_cache_type,
    }
    params = parameters or {}
    for key, field_names in (
        ("num_batch", ("n_batch", "n_ubatch")),
        ("num_gpu", ("n_gpu_layers",)),
    ):
        values = params.get(key)
        if values and values[-1].lstrip("-").isdigit():
            n = int(values[-1])
            for f in field_names:
                changes[f] = ALL_LAYERS if f == "n_gpu_layers" and n < 0 else n
    settings = base.replace(**changes)
    est = estimate(spec, settings, hw)
    gpu = sum(d.total_bytes for d in est.devices if d.kind != "host")
    return OllamaComparison(
        name=running.name,
        context_length=running.context_length,
        num_parallel=num_parallel,
        ollama_total_bytes=running.size_bytes,
        ollama_vram_bytes=running.size_vram_bytes,
        ggtune_total_bytes=est.total_bytes,
        ggtune_gpu_bytes=gpu,
        settings=settings,
    )
