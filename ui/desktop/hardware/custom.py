"""The Hardware tab's custom-profile editor, pure (no Qt): :func:`custom_profile_toml` and
:func:`check_custom_profile` turn the editor's fields into a ``[[profile]]`` table that
:func:`app.hardware.profiles.parse_profile` validates before anything is written.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from app.errors import HardwareProfileError
from app.hardware.profiles import HardwareProfile, ProfileKind, ProfileSet, parse_profile


@dataclass(frozen=True, slots=True)
class CustomProfileFields:
    """What the editor holds: figures in GiB, GB/s, a fraction, TFLOPS (0: unknown)."""

    name: str
    kind: ProfileKind
    backend: str
    memory_gib: float
    bandwidth_gb_per_s: float
    usable_fraction: float
    fp16_tflops: float
    source: str


def profile_id(name: str) -> str:
    """Return the profile id for ``name``: "My RTX 3090 Ti" → "my-rtx-3090-ti"."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.]+", "-", name.strip().lower())).strip("-.")


def custom_profile_toml(fields: CustomProfileFields) -> str:
    """Return ``fields`` as a profile file (one ``[[profile]]`` table, TOML)."""

    def quoted(text: str) -> str:
        return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string

    def figure(value: float | None) -> str:
        source = quoted(fields.source.strip())
        if value is None:
            return f"{{ source = {source} }}"
        return f"{{ value = {value!r}, source = {source} }}"

    fp16 = fields.fp16_tflops if fields.fp16_tflops > 0 else None
    lines = [
        "# A custom hardware profile, written by ggtune's Hardware tab.",
        "[[profile]]",
        f"id = {quoted(profile_id(fields.name))}",
        f"name = {quoted(fields.name.strip())}",
        f"kind = {quoted(fields.kind)}",
        f"backend = {quoted(fields.backend)}",
        f"memory_gib = {figure(float(fields.memory_gib))}",
        f"bandwidth_gb_per_s = {figure(float(fields.bandwidth_gb_per_s))}",
        f"usable_fraction = {figure(float(fields.usable_fraction))}",
        f"fp16_tflops = {figure(fp16)}",
    ]
    return "\n".join(lines) + "\n"


def check_custom_profile(
    fields: CustomProfileFields, folder: Path, profiles: ProfileSet
) -> tuple[HardwareProfile, str, Path]:
    """Return the validated profile, its file text and path in ``folder``; raise if invalid.

    Raise :class:`~app.errors.HardwareProfileError` for a missing name or source, a figure
    the profile schema refuses, or a name another profile (not the user's own file of the
    same id) already has.
    """
    pid = profile_id(fields.name)
    if not pid:
        raise HardwareProfileError("give the profile a name (letters or digits)")
    if not fields.source.strip():
        raise HardwareProfileError("say where the figures come from (source)")
    path = folder / f"{pid}.toml"
    text = custom_profile_toml(fields)
    profile = parse_profile(tomllib.loads(text)["profile"][0], path, 1)
    taken = profiles.profiles.get(pid) or profiles.profiles.get(profiles.aliases.get(pid, ""))
    if taken is not None and Path(taken.path) != path:
        raise HardwareProfileError(
            f"the name {pid!r} is taken by the profile {taken.name!r} ({taken.path}); "
            "choose another name"
        )
    return profile, text, path
