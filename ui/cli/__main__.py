"""``python -m ui.cli COMMAND …``: the command line without the desktop dispatch of ui.entry."""

from ui.cli.main import main

main()
