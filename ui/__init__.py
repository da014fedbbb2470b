"""The faces of ggtune: the CLI (ui.cli) and, later, the desktop app (ui.desktop)."""
