"""``ggtune export``: settings out to a runner.

``ggtune export MODEL --to ollama|lmstudio|llama-server|llama-cpp-python [settings] [-o PATH]
[--overwrite]`` prints the export (or writes it atomically with ``-o``; an existing file is
kept unless ``--overwrite``). MODEL is a GGUF path or a name from ``ggtune library``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from app.errors import ExportError
from app.export.common import ModelFacts, SystemName, model_facts, write_text_atomic
from app.export.targets import TARGETS, ExportOptions, export_for, this_system
from app.planning.runner_plan import fitting_comments
from app.settings import RunnerName
from app.sources.library import scan_library
from app.sources.reading import load_model_spec
from ui.cli.commands import COMMANDS
from ui.cli.options import add_settings_flags, hardware_from_args, plan_from_args


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add the ``export`` subcommand to ``sub``."""
    p = sub.add_parser("export", help=COMMANDS["export"].help)
    p.add_argument("model", help="a .gguf path, or a model name from `ggtune library`")
    p.add_argument("--to", choices=TARGETS, required=True, help="the runner to export for")
    add_settings_flags(p)
    p.add_argument("-o", "--output", metavar="PATH", help="write to PATH instead of printing")
    p.add_argument("--overwrite", action="store_true", help="replace PATH if it exists")
    p.add_argument("--name", help="Ollama: the name for `ollama create` (default: file name)")
    p.add_argument("--draft", metavar="GGUF", help="a draft model for speculative decoding")
    p.add_argument("--stop", action="append", default=[], help="Ollama: a stop string (repeat)")
    p.add_argument("-t", "--threads", type=int, metavar="N", help="CPU threads")
    p.add_argument(
        "--system",
        choices=("linux", "macos", "windows"),
        default=None,
        help="whose shell and service manager to write for (default: this one)",
    )
    p.add_argument(
        "--write-lmstudio-config",
        action="store_true",
        help="LM Studio: write the per-model config file (a backup of any old one is kept)",
    )
    p.set_defaults(handler=run_export)


def _resolve_model(text: str) -> str:
    """Return the path of ``text``: an existing file, or a library entry's name."""
    if os.path.isfile(os.path.expanduser(text)):
        return os.path.abspath(os.path.expanduser(text))
    library = scan_library()
    entry = library.find(text)
    if entry is None:
        raise ExportError(f"{text}: no such file, and no model of that name in the library")
    return entry.path


_RUNNER_OF_TARGET: dict[str, RunnerName] = {
    "ollama": "ollama",
    "lmstudio": "lmstudio",
    "llama-server": "llama-server",
    "llama-cpp-python": "llama-cpp-python",
}


def run_export(args: argparse.Namespace) -> int:
    """Print or write the export; return the exit code.

    The settings are what the target runner will run: its defaults (``--runner`` picks
    another preset), the flags given, and its own fitting as ggtune reproduces it.
    """
    path = _resolve_model(args.model)
    hardware = hardware_from_args(args)
    if args.runner is None:
        args.runner = _RUNNER_OF_TARGET[args.to]
    spec = load_model_spec(path)
    plan = plan_from_args(args, spec, hardware, model=path)
    settings = plan.settings
    facts: ModelFacts = model_facts(path)
    system: SystemName = args.system or this_system()
    projector = plan.projector
    # Ollama: num_gpu unset unless pinned (Ollama passes no -ngl and llama-server fits)
    auto = args.to == "ollama" and "n_gpu_layers" not in plan.pinned and args.runner == "ollama"
    options = ExportOptions(
        name=args.name,
        draft=args.draft,
        threads=args.threads,
        stop=args.stop,
        num_gpu_auto=auto,
        fitting=fitting_comments(plan, pinned_in_export=not auto),
        mmproj_path=projector.path if projector is not None else None,
        mmproj_offload=plan.projector_on_gpu,
        cache_ram_mib=args.cache_ram_mib,
        ctx_checkpoints=args.ctx_checkpoints,
    )
    out = export_for(args.to, path, settings, facts=facts, system=system, options=options)
    text = out.file_text if args.output else out.text
    # Ollama's instructions name the Modelfile: printed once it is written (instructions
    # for a file that could not be written would only mislead); they hold its notes
    after = None
    if out.ollama is not None and args.output:
        after = out.ollama.render(system, modelfile_path=args.output)
    notes = out.notes if args.output and out.ollama is None else ()
    if args.to == "lmstudio" and args.write_lmstudio_config:
        from app.export.lmstudio import write_lmstudio_config

        assert out.lmstudio is not None
        written = write_lmstudio_config(out.lmstudio, overwrite=args.overwrite)
        print(f"wrote {written}", file=sys.stderr)
    if args.output:
        written = write_text_atomic(args.output, text, overwrite=args.overwrite)
        if after is not None:
            print(after, file=sys.stderr)
        print(f"wrote {written}", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


__all__ = ["register", "run_export"]
