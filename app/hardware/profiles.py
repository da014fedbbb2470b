"""Hardware profiles: machines the user does not have, as data with a source for each figure.

Profiles live in TOML files: the built-in ones under ``profiles/hardware/`` (one file per
family) and the user's own under ``platformdirs.user_config_dir("ggtune")/profiles``. The
schema is documented in ``profiles/hardware/README.md`` and checked here, field by field;
a bad file raises :class:`~app.errors.HardwareProfileError` naming the file, the profile
and the field.

A profile is a GPU (``kind = "gpu"``), a whole unified-memory machine (``"unified"``:
Apple Silicon, DGX Spark) or a CPU-only host (``"host"``). :func:`compose` turns what a
user types into an :class:`~app.hardware.devices.Hardware`::

    compose("rtx-3090")                      # one GPU; the host is this machine's
    compose("2x rtx-3090 + 64 GB DDR5")      # CUDA0, CUDA1, 64 GiB of DDR5 RAM
    compose("m2-max:96GB")                   # an M2 Max with 96 GiB of unified memory
    compose("this + rtx-4090")               # this machine with one more GPU

Memory sizes are binary (GiB), as RAM and VRAM are sold: "64 GB" is 64 GiB.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from app.errors import HardwareProfileError, StateFileError
from app.hardware.devices import Device, Hardware, planned_host
from app.paths import data_dir
from app.state_files import load_toml
from app.units import GIB

ProfileKind = Literal["gpu", "unified", "host"]
PROFILE_KINDS: Final[tuple[ProfileKind, ...]] = ("gpu", "unified", "host")

BACKENDS: Final = ("CUDA", "ROCm", "MTL", "Vulkan", "SYCL", "CPU")
"""llama.cpp's device name prefixes (vendored ggml: ``GGML_CUDA_NAME`` is "CUDA", or "ROCm"
in a HIP build, ``ggml-metal-device.m`` names devices "MTL0"…, ``GGML_VK_NAME`` "Vulkan",
``GGML_SYCL_NAME`` "SYCL"); the device name is the prefix and an index."""

FIGURES: Final = ("memory_gib", "bandwidth_gb_per_s", "usable_fraction", "fp16_tflops")
"""The figures every profile has, each a table ``{ value = …, source = "…" }``; ``value``
may be left out (unknown) only for ``fp16_tflops``, and then the source says why."""

_REQUIRED: Final = ("id", "name", "kind", "backend", *FIGURES)
OPTIONAL_FIGURES: Final = ("int8_tops",)
"""Figures a profile may have: ``int8_tops``, peak dense INT8 tensor TOPS (NVIDIA GPUs,
where llama.cpp's MMQ kernels multiply quantized weights on the int8 tensor cores)."""
_OPTIONAL: Final = ("aliases", "chip", "gpu_cores", "cpu_flags", "notes", *OPTIONAL_FIGURES)
_ID_RE: Final = re.compile(r"^[a-z0-9][a-z0-9.-]*$")

METAL_SMALL_MEMORY_BYTES: Final = 36 * GIB
"""Up to this much unified memory, Metal's default working set is 2/3 of it, above it 3/4
(see :func:`metal_default_working_set_bytes`)."""


METAL_PAGE_BYTES: Final = 16384
"""Apple Silicon's page size; the default working set is a whole number of pages."""


def metal_default_working_set_bytes(memory_bytes: int) -> int:
    """Return the default ``recommendedMaxWorkingSetSize`` of a Mac with this much memory.

    Apple does not document the rule; llama.cpp's Metal backend reports this value as the
    GPU's total memory (``ggml_metal_device_get_memory`` in ``ggml-metal-device.m``) and
    logs it at start-up (``recommendedMaxWorkingSetSize = %8.2f MB``, in MiB), which gives
    2/3 of memory up to 36 GiB and 3/4 above, rounded up to a 16 KiB page:
    16 GiB → 10922.67 (llama.cpp #2209, llama-cpp-python #687), 32 GiB → 21845.34
    (llama.cpp PR #2011, ollama #434), 64 GiB → 49152.00 (llama.cpp #1870).
    ``sysctl iogpu.wired_limit_mb`` overrides it when non-zero. Newer macOS releases may
    give more (an M5 Max with 128 GiB reported 107.52 GiB, 84%, on macOS 26: antirez/ds4
    #893), so the engine's own figure (``ggtune hw``) wins when it is known.
    """
    assert memory_bytes >= 0, f"memory must be ≥ 0, got {memory_bytes}"
    if memory_bytes <= METAL_SMALL_MEMORY_BYTES:
        share = memory_bytes * 2 / 3
    else:
        share = memory_bytes * 3 / 4
    return math.ceil(share / METAL_PAGE_BYTES) * METAL_PAGE_BYTES


@dataclass(frozen=True, slots=True)
class Figure:
    """One number of a profile and where it comes from; ``value`` ``None`` is unknown."""

    value: float | None
    source: str


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One profile, as validated from its file (see the module doc and the README)."""

    id: str
    name: str
    kind: ProfileKind
    backend: str
    memory_gib: Figure
    bandwidth_gb_per_s: Figure
    usable_fraction: Figure
    fp16_tflops: Figure
    int8_tops: Figure | None = None
    aliases: tuple[str, ...] = ()
    chip: str | None = None
    gpu_cores: int | None = None
    cpu_flags: tuple[str, ...] = ()
    notes: str = ""
    path: str = ""

    @property
    def memory_bytes(self) -> int:
        """Return the physical memory in bytes."""
        assert self.memory_gib.value is not None, "memory is always known"
        return round(self.memory_gib.value * GIB)

    @property
    def usable_bytes(self) -> int:
        """Return the memory a model may use: memory × usable fraction, in bytes."""
        assert self.usable_fraction.value is not None, "usable fraction is always known"
        return int(self.memory_bytes * self.usable_fraction.value)

    def with_memory(self, gib: float) -> HardwareProfile:
        """Return this profile with ``gib`` GiB of memory (a Mac's working set follows)."""
        assert gib > 0, f"memory must be > 0 GiB, got {gib}"
        memory = Figure(gib, f"given by the user (profile {self.id} has {self.memory_gib.value})")
        usable = self.usable_fraction
        if self.backend == "MTL":
            bytes_ = round(gib * GIB)
            usable = Figure(
                metal_default_working_set_bytes(bytes_) / bytes_,
                "Metal's default working set for this memory size",
            )
        old = self.memory_gib.value
        name = re.sub(rf"\b{old:g} GB\b", f"{gib:g} GB", self.name) if old else self.name
        return replace(self, name=name, memory_gib=memory, usable_fraction=usable)

    def gpu_device(self, name: str) -> Device:
        """Return the GPU of this profile as a device named ``name`` (e.g. "CUDA1")."""
        assert self.kind in ("gpu", "unified"), f"{self.id} is a {self.kind} profile"
        return Device(
            name,
            "gpu",
            self.usable_bytes,
            None,
            self.bandwidth_gb_per_s.value,
            unified_memory=self.kind == "unified",
            fp16_tflops=self.fp16_tflops.value,
            int8_tops=self.int8_tops.value if self.int8_tops else None,
            memory_bytes=self.memory_bytes,
            description=self.name,
        )

    def host_device(self) -> Device:
        """Return the host of this profile (a unified machine's CPU sees all its memory)."""
        assert self.kind in ("host", "unified"), f"{self.id} is a GPU profile"
        unified = self.kind == "unified"
        capacity = self.memory_bytes if unified else self.usable_bytes
        return Device(
            "CPU",
            "host",
            capacity,
            None,
            self.bandwidth_gb_per_s.value,
            unified_memory=unified,
            cpu_flags=self.cpu_flags,
            fp16_tflops=self.fp16_tflops.value if not unified else None,
            memory_bytes=self.memory_bytes,
            description=self.name,
        )


# --- loading ---------------------------------------------------------------------------


def builtin_profiles_dir() -> Path:
    """Return the folder of the built-in profiles (``profiles/hardware/`` in the source)."""
    return data_dir() / "hardware"


def user_profiles_dir() -> Path:
    """Return the folder of the user's own profiles (created by nobody here).

    Linux ``$XDG_CONFIG_HOME/ggtune/profiles`` (default ``~/.config/ggtune/profiles``),
    macOS ``~/Library/Application Support/ggtune/profiles``, Windows
    ``%LOCALAPPDATA%\\ggtune\\profiles``.
    """
    import platformdirs

    return Path(platformdirs.user_config_dir("ggtune", appauthor=False)) / "profiles"


def _figure(raw: object, key: str, where: str, path: Path) -> Figure:
    if not isinstance(raw, dict):
        raise HardwareProfileError(
            f'{where}: {key} must be a table like {{ value = 1.0, source = "…" }}', path=path
        )
    extra = set(raw) - {"value", "source"}
    if extra:
        raise HardwareProfileError(f"{where}: {key} has unknown keys {sorted(extra)}", path=path)
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise HardwareProfileError(f"{where}: {key}.source must be a non-empty string", path=path)
    value = raw.get("value")
    if value is None:
        if key != "fp16_tflops":
            raise HardwareProfileError(f"{where}: {key}.value is missing", path=path)
        return Figure(None, source.strip())
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HardwareProfileError(
            f"{where}: {key}.value must be a number, got {value!r}", path=path
        )
    if value <= 0 or (key == "usable_fraction" and value > 1):
        bound = "in (0, 1]" if key == "usable_fraction" else "> 0"
        raise HardwareProfileError(
            f"{where}: {key}.value must be a number {bound}, got {value!r}", path=path
        )
    return Figure(float(value), source.strip())


def _strings(raw: object, key: str, where: str, path: Path) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        raise HardwareProfileError(f"{where}: {key} must be a list of strings", path=path)
    return tuple(raw)


def parse_profile(raw: object, path: Path, number: int) -> HardwareProfile:
    """Validate one ``[[profile]]`` table (``number`` counts from 1 in its file)."""
    where = f"profile #{number}"
    if not isinstance(raw, dict):
        raise HardwareProfileError(f"{where} is not a table", path=path)
    if isinstance(raw.get("id"), str):
        where = f"profile {raw['id']!r} (#{number})"
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise HardwareProfileError(f"{where}: missing {', '.join(missing)}", path=path)
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise HardwareProfileError(f"{where}: unknown keys {unknown}", path=path)
    pid, name, kind, backend = raw["id"], raw["name"], raw["kind"], raw["backend"]
    if not isinstance(pid, str) or not _ID_RE.match(pid):
        raise HardwareProfileError(
            f"{where}: id must be lowercase letters, digits, '.' and '-', got {pid!r}", path=path
        )
    if not isinstance(name, str) or not name.strip():
        raise HardwareProfileError(f"{where}: name must be a non-empty string", path=path)
    if kind not in PROFILE_KINDS:
        raise HardwareProfileError(
            f"{where}: kind must be one of {', '.join(PROFILE_KINDS)}, got {kind!r}", path=path
        )
    if backend not in BACKENDS:
        raise HardwareProfileError(
            f"{where}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}", path=path
        )
    if (kind == "host") != (backend == "CPU"):
        raise HardwareProfileError(
            f"{where}: backend CPU goes with kind host (and only with it)", path=path
        )
    figures = {k: _figure(raw[k], k, where, path) for k in FIGURES}
    for k in OPTIONAL_FIGURES:
        if k in raw:
            if kind == "host":
                raise HardwareProfileError(f"{where}: {k} is a GPU figure", path=path)
            figures[k] = _figure(raw[k], k, where, path)
    gpu_cores = raw.get("gpu_cores")
    if gpu_cores is not None and (
        isinstance(gpu_cores, bool) or not isinstance(gpu_cores, int) or gpu_cores <= 0
    ):
        raise HardwareProfileError(f"{where}: gpu_cores must be a whole number > 0", path=path)
    chip = raw.get("chip")
    if chip is not None and (not isinstance(chip, str) or not chip):
        raise HardwareProfileError(f"{where}: chip must be a non-empty string", path=path)
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise HardwareProfileError(f"{where}: notes must be a string", path=path)
    aliases = _strings(raw.get("aliases", []), "aliases", where, path)
    return HardwareProfile(
        id=pid,
        name=name.strip(),
        kind=kind,
        backend=backend,
        aliases=tuple(a.lower() for a in aliases),
        chip=chip,
        gpu_cores=gpu_cores,
        cpu_flags=_strings(raw.get("cpu_flags", []), "cpu_flags", where, path),
        notes=notes,
        path=str(path),
        **figures,
    )


def load_profile_file(path: str | os.PathLike[str]) -> tuple[HardwareProfile, ...]:
    """Read and validate every profile in one TOML file."""
    p = Path(path)
    try:
        data = load_toml(p, max_bytes=1 << 20)
    except StateFileError as err:
        raise HardwareProfileError(err.message, path=p) from None
    extra = set(data) - {"profile"}
    if extra:
        raise HardwareProfileError(
            f"unknown top-level keys {sorted(extra)} (profiles are [[profile]] tables)", path=p
        )
    raw = data.get("profile")
    if not isinstance(raw, list) or not raw:
        raise HardwareProfileError("no [[profile]] tables", path=p)
    return tuple(parse_profile(r, p, i) for i, r in enumerate(raw, start=1))


@dataclass(frozen=True, slots=True)
class ProfileSet:
    """Profiles by id, with aliases resolved; built-in first, then the user's."""

    profiles: Mapping[str, HardwareProfile]
    aliases: Mapping[str, str]
    issues: tuple[HardwareProfileError, ...] = ()
    """The user's profile files that were skipped because they are broken (each names its
    file); the built-in profiles and the user's good files still load."""

    def get(self, name: str) -> HardwareProfile:
        """Return the profile with this id or alias (case-insensitive), or raise."""
        key = name.strip().lower()
        pid = self._find(key)
        if pid is None:
            close = [p for p in self.profiles if key and (key in p or p in key)][:5]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            skipped = (
                f"; {len(self.issues)} of your profile files could not be read ({self.issues[0]})"
                if self.issues
                else ""
            )
            raise HardwareProfileError(
                f"no hardware profile {name!r}{hint} (the desktop's Hardware tab and "
                f"ggtune hw --profiles list them){skipped}"
            )
        return self.profiles[pid]

    def _find(self, key: str) -> str | None:
        """Return the id ``key`` names: an id or alias, written with spaces too ("rtx 3060"
        is rtx-3060), or a profile's full name ("NVIDIA GeForce RTX 3060 12 GB")."""
        for k in (key, re.sub(r"[\s_]+", "-", key)):
            if k in self.profiles:
                return k
            if k in self.aliases:
                return self.aliases[k]
        for pid, prof in self.profiles.items():
            if prof.name.lower() == key:
                return pid
        return None

    def __iter__(self) -> Iterator[HardwareProfile]:
        return iter(self.profiles.values())

    def __len__(self) -> int:
        return len(self.profiles)


def load_profiles(
    dirs: Iterable[str | os.PathLike[str]] | None = None, *, include_user: bool = True
) -> ProfileSet:
    """Load every ``*.toml`` profile from ``dirs`` (default: built-in, then the user's).

    An id or alias defined twice is an error naming both files. With ``dirs`` given every
    bad file raises :class:`~app.errors.HardwareProfileError`; by default a broken file in
    the user's folder is skipped and kept in :attr:`ProfileSet.issues`, so one bad file
    does not take every other profile with it.
    """
    folders = [Path(d) for d in dirs] if dirs is not None else [builtin_profiles_dir()]
    lenient: Path | None = None
    if dirs is None and include_user:
        lenient = user_profiles_dir()
        folders.append(lenient)
    profiles: dict[str, HardwareProfile] = {}
    aliases: dict[str, str] = {}
    issues: list[HardwareProfileError] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                found = load_profile_file(path)
            except HardwareProfileError as err:
                if folder != lenient:
                    raise
                issues.append(err)
                continue
            for prof in found:
                for key in (prof.id, *prof.aliases):
                    owner = profiles.get(key) or profiles.get(aliases.get(key, ""))
                    if owner is not None:
                        raise HardwareProfileError(
                            f"profile {prof.id!r}: the name {key!r} is taken by profile "
                            f"{owner.id!r} in {owner.path}",
                            path=path,
                        )
                profiles[prof.id] = prof
                aliases.update(dict.fromkeys(prof.aliases, prof.id))
    return ProfileSet(profiles, aliases, tuple(issues))


def apple_profile(
    profiles: ProfileSet, chip: str, gpu_cores: int | None = None
) -> HardwareProfile | None:
    """Return the profile of an Apple chip ("Apple M2 Max"), by GPU cores if it has variants."""
    found = [p for p in profiles if p.chip is not None and p.chip.lower() == chip.strip().lower()]
    if len(found) > 1 and gpu_cores is not None:
        exact = [p for p in found if p.gpu_cores == gpu_cores]
        if exact:
            return exact[0]
        # a binned chip between two variants: the one with fewer cores is the safe guess
        found.sort(key=lambda p: p.gpu_cores or 0)
    return found[0] if found else None


# --- composition -----------------------------------------------------------------------

_MAX_GIB: Final = float(1 << 20)

MAX_GPUS: Final = 16
"""Most GPUs a composition may hold: llama.cpp splits a model over at most
``llama_max_devices()`` = 16 devices (src/llama.cpp)."""

_THIS: Final = {"this", "this-machine", "this machine", "local", "here"}
_SIZE_RE: Final = re.compile(r"^(\d+(?:\.\d+)?)\s*(gb|gib|g)\b\s*(.*)$", re.IGNORECASE)
_COUNT_RE: Final = re.compile(r"^(\d{1,6})\s*[x×*]\s*(.+)$", re.IGNORECASE)
_OVERRIDE_RE: Final = re.compile(r"^(.+?):\s*(\d+(?:\.\d+)?)\s*(gb|gib|g)?$", re.IGNORECASE)


def _parse_gib(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(gb|gib|g)?", text.strip(), re.IGNORECASE)
    if m is None or not 0 < float(m.group(1)) <= _MAX_GIB:
        raise HardwareProfileError(f"expected a memory size like 64GB, got {text!r}")
    return float(m.group(1))


def compose(
    text: str,
    *,
    profiles: ProfileSet | None = None,
    default_host: Device | None = None,
    this_machine: Callable[[], Hardware] | None = None,
) -> Hardware:
    """Return the machine ``text`` describes (see the module doc for examples).

    Terms are separated by ``+`` or ``,``: ``[N x] PROFILE[:SIZE]``, ``SIZE [HOST-PROFILE]``
    (system RAM, e.g. "64 GB DDR5"), or ``this`` (this machine, from ``this_machine``).
    GPUs are numbered per backend in the order given (CUDA0, CUDA1, ROCm0 …). Without a
    host term the host is ``default_host`` (the CLI passes this machine's), or an unknown
    one. A unified-memory profile is a whole machine: it brings its own host.
    """
    profiles = profiles if profiles is not None else load_profiles()
    terms = [t.strip() for t in re.split(r"[+,]", text) if t.strip()]
    if not terms:
        raise HardwareProfileError("no hardware given (e.g. rtx-3090, or 2x rtx-3090 + 64GB)")
    host: Device | None = None
    host_term = ""
    gpus: list[Device] = []
    counters: dict[str, int] = {}

    def set_host(device: Device, term: str) -> None:
        nonlocal host, host_term
        if host is not None:
            raise HardwareProfileError(
                f"{term!r} and {host_term!r} both describe the host; give one"
            )
        host, host_term = device, term

    def add_gpu(prof: HardwareProfile, term: str) -> None:
        if len(gpus) >= MAX_GPUS:
            raise HardwareProfileError(
                f"{term!r}: more than {MAX_GPUS} GPUs in all; llama.cpp splits a model over "
                f"at most {MAX_GPUS} devices"
            )
        index = counters.get(prof.backend, 0)
        counters[prof.backend] = index + 1
        gpus.append(prof.gpu_device(f"{prof.backend}{index}"))

    for term in terms:
        if term.lower() in _THIS:
            if this_machine is None:
                raise HardwareProfileError("'this' (this machine) is not available here")
            here = this_machine()
            set_host(here.host, term)
            for g in here.gpus:
                prefix = re.sub(r"\d+$", "", g.name)
                counters[prefix] = counters.get(prefix, 0) + 1
                gpus.append(g)
            continue
        size = _SIZE_RE.match(term)
        if size is not None:
            gib = float(size.group(1))
            if not 0 < gib <= _MAX_GIB:
                raise HardwareProfileError(f"{term!r}: memory must be > 0 and at most 1 PiB")
            rest = size.group(3).strip()
            if not rest:
                ram = round(gib * GIB)
                set_host(planned_host(ram), term)
                continue
            prof = profiles.get(rest)
            if prof.kind != "host":
                raise HardwareProfileError(
                    f"{term!r}: {prof.id} is a {prof.kind} profile; a size goes before system "
                    f"RAM (e.g. 64 GB DDR5), or after a profile as {prof.id}:{gib:g}GB"
                )
            set_host(prof.with_memory(gib).host_device(), term)
            continue
        count = 1
        name = term
        m = _COUNT_RE.match(term)
        if m is not None:
            count, name = int(m.group(1)), m.group(2).strip()
            if count < 1:
                raise HardwareProfileError(f"{term!r}: the count must be ≥ 1")
        override = _OVERRIDE_RE.match(name)
        memory: float | None = None
        if override is not None:
            name, memory = override.group(1).strip(), _parse_gib(override.group(2))
        prof = profiles.get(name)
        if memory is not None:
            prof = prof.with_memory(memory)
        if prof.kind == "host":
            if count != 1:
                raise HardwareProfileError(f"{term!r}: a machine has one host")
            set_host(prof.host_device(), term)
        elif prof.kind == "unified":
            if count != 1:
                raise HardwareProfileError(f"{term!r}: {prof.id} is a whole machine; give one")
            set_host(prof.host_device(), term)
            add_gpu(prof, term)
        else:
            for _ in range(count):
                add_gpu(prof, term)
    if host is None:
        host = default_host if default_host is not None else Device("CPU", "host")
    return Hardware(host=host, gpus=tuple(gpus))
