"""Every ``ggtune`` command: its name, the module that implements it, its help line.

A module of ui/cli/ has ``register(sub) -> None``, which adds its command's parser (with
``help=COMMANDS[name].help``) and ``set_defaults(handler=…)``; a handler takes the parsed
arguments and returns the exit code. Add a row here and a module to add a command; the
parser imports a command's module only when that command runs (:mod:`ui.cli.main`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Command:
    """One command: the module that registers it and its line in ``ggtune --help``."""

    module: str
    help: str


COMMANDS: Final[dict[str, Command]] = {
    "inspect": Command("ui.cli.inspect", "describe a GGUF model"),
    "estimate": Command("ui.cli.estimate", "where every byte goes, per device"),
    "hw": Command("ui.cli.hw", "what ggtune and llama.cpp see of this machine; profiles"),
    "export": Command("ui.cli.export", "write the settings in a runner's own format"),
    "library": Command("ui.cli.library", "list the GGUF models on this machine"),
    "bench": Command(
        "ui.cli.bench", "run the model on llama.cpp: speed and memory, measured beside estimated"
    ),
    "catalog": Command("ui.cli.catalog", "popular models to plan without downloading them"),
    "quants": Command("ui.cli.quant", "the model at every quant level: size, bpw, quality"),
    "hf": Command(
        "ui.cli.hf", "compare a Hugging Face repo's quant files without downloading; download one"
    ),
    "search": Command(
        "ui.cli.search", "search the Hugging Face Hub for GGUF repos, most downloaded first"
    ),
    "compare": Command("ui.cli.compare", "every quant level side by side: memory, speed, quality"),
    "recommend": Command("ui.cli.recommend", "settings for a goal, and why"),
    "plan": Command("ui.cli.plan", "how many users fit at a context and speed"),
}
"""In the order ``ggtune --help`` lists them."""
