"""The ggtune desktop app (PySide6): open a model, move a slider, see where the memory goes.

The only package that imports Qt (an import-linter contract checks it). Each screen has one
controller (a ``QObject`` holding its state and emitting signals that carry the frozen
dataclasses of ``app/``) and widgets that subscribe to it; widgets hold no estimation logic.
Short blocking jobs (header reads, the hardware probe) run on a ``QThreadPool`` through
:func:`ui.desktop.shared.jobs.run_job`; llama.cpp runs only in ``runner``'s child process.

Start it with ``ggtune-desktop`` or ``python -m ui.desktop``.
"""
