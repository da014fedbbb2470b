"""The Explain tab's words: :func:`sections_html` renders the sections of
:func:`app.planning.explain.sections_from_facts` as simple HTML, and
:func:`catalog_sections` tells them for a catalog model (``catalog:NAME``), which has no
file: it says so where the words speak of "this file", and at which quant level its
weights are planned.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence

from PySide6.QtGui import QPalette

from app.planning.explain import Section


def catalog_sections(
    sections: Sequence[Section],
    model_name: str,
    quant: str | None,
    converted: str,
    bits_per_weight: float,
) -> tuple[Section, ...]:
    """Return ``sections`` told for a catalog model planned at ``quant`` (None: as the
    converter writes it, ``converted``, e.g. F16, at ``bits_per_weight``): the weights step
    says there is no file and where its numbers come from.
    """
    where = (
        f"quantized to {quant}, the level picked in Settings"
        if quant
        else f"as converted ({converted}), before quantizing; pick a quant level in Settings "
        "to plan the file you would download"
    )
    lead = (
        f"{model_name} comes from ggtune's catalog: there is no file yet, so its weights are "
        f"planned from the published config, {where}."
    )
    unquantized = (
        f"At {converted} each weight keeps its {bits_per_weight:.0f} bits from training. "
        "Quantizing rounds them to fewer bits, like saving a photo as a smaller JPEG: much "
        "smaller, slightly less exact. Fewer bits mean less memory and faster writing (less "
        "to read per token), at some cost in quality."
    )
    out = []
    for section in sections:
        if section.key == "weights":
            rest = tuple(
                # the weights are not quantized yet, and there is no file to speak of
                unquantized
                if quant is None and bits_per_weight >= 15.5 and p.startswith("This file")
                else p.replace("This file is quantized as", "Planned as", 1).replace(
                    "That makes the file", "A file at this level would be", 1
                )
                for p in section.paragraphs[1:]
            )
            section = dataclasses.replace(
                section, paragraphs=(*section.paragraphs[:1], lead, *rest)
            )
        out.append(section)
    return tuple(out)


def sections_html(sections: Sequence[Section], pal: QPalette) -> str:
    """Return the sections as simple HTML: a heading, paragraphs, the key numbers."""
    muted = pal.color(QPalette.ColorRole.PlaceholderText).name()
    out = []
    for s in sections:
        out.append(f"<h3>{html.escape(s.title)}</h3>")
        out.extend(f"<p>{html.escape(p)}</p>" for p in s.paragraphs)
        if s.numbers:
            cells = " · ".join(
                f"<span style='color:{muted}'>{html.escape(n.label)}:</span> "
                f"<b>{html.escape(n.text)}</b>"
                for n in s.numbers
            )
            out.append(f"<p>{cells}</p>")
    return "".join(out)
