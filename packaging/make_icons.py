"""Render packaging/icons/ggtune.svg to the PNG, ICO and ICNS files committed beside it.

    .venv/bin/python packaging/make_icons.py

Uses Qt alone (PySide6's QSvgRenderer, and Qt's ``ico``/``icns`` image writers), so no
extra tool is needed. Run it after editing the SVG and commit what it writes:
``ggtune-<size>.png`` for 16..512 (the window icon and Linux's hicolor theme sizes),
``ggtune.ico`` (Windows: 16..256 in one file) and ``ggtune.icns`` (macOS).
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent / "icons"
SVG = ICONS / "ggtune.svg"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)  # 256 is the largest an ICO entry holds


def ico_file(pngs: list[bytes], sizes: tuple[int, ...]) -> bytes:
    """Return a Windows .ico holding one PNG per size (PNG entries: Windows Vista and later).

    Qt's ico writer stores one image per file, so the container is written here: an
    ICONDIR header, one 16-byte ICONDIRENTRY per image, then the PNGs.
    """
    assert len(pngs) == len(sizes), "one PNG per size"
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = len(header) + 16 * len(pngs)
    entries, data = b"", b""
    for png, size in zip(pngs, sizes, strict=True):
        side = 0 if size >= 256 else size  # 0 means 256 in an ICONDIRENTRY
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(png), offset + len(data))
        data += png
    return header + entries + data


def main() -> int:
    """Write the icon files; return 0, or 1 with the reason on stderr."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QImageWriter, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    assert app is not None, "a QGuiApplication is needed to paint"
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        print(f"make_icons: {SVG} is not a valid SVG", file=sys.stderr)
        return 1

    def render(size: int) -> QImage:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        return image

    def png_bytes(image: QImage) -> bytes:
        buffer = QBuffer()
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")
        return bytes(buffer.data().data())

    for size in PNG_SIZES:
        path = ICONS / f"ggtune-{size}.png"
        if not render(size).save(str(path), "PNG"):
            print(f"make_icons: could not write {path}", file=sys.stderr)
            return 1
        print(f"wrote {path.relative_to(ICONS.parent.parent)}")
    ico = ICONS / "ggtune.ico"
    ico.write_bytes(ico_file([png_bytes(render(size)) for size in ICO_SIZES], ICO_SIZES))
    print(f"wrote {ico.relative_to(ICONS.parent.parent)}")
    # Qt's icns writer (the qicns image format plugin) stores one image; macOS scales it.
    icns = ICONS / "ggtune.icns"
    writer = QImageWriter(str(icns), b"icns")
    if not writer.write(render(512)):
        print(f"make_icons: {icns.name} not written: {writer.errorString()}", file=sys.stderr)
        return 1
    print(f"wrote {icns.relative_to(ICONS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
