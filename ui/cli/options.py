"""What the commands share on the way in: the parser, the settings flags, the hardware and
the model a command plans for.

Settings flags use llama-server's names and meanings so users can paste what they know;
flags not given take the chosen runner's defaults.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from app.hardware.devices import Device, Hardware
from app.settings import CACHE_TYPES, RUNNERS, RunnerName, Settings, runner_defaults
from app.units import GIB

EXIT_USAGE = 2
"""Exit status of a usage error or of any :class:`~app.errors.GGTuneError`."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"ggtune: {message} (see ggtune {self.prog.split()[-1]} --help)\n")


def _on_off(value: str) -> bool:
    v = value.lower()
    if v in ("on", "1", "true", "yes"):
        return True
    if v in ("off", "0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def _ngl(value: str) -> int:
    v = value.lower()
    if v in ("all", "auto", "max"):
        return -1
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, all or auto, got {value!r}") from None
    # llama.cpp treats any number above the layer count as "all"; -1 means all too
    return -1 if n < 0 else n


def _tensor_split(value: str) -> tuple[float, ...]:
    try:
        parts = tuple(float(p) for p in value.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected proportions like 3,1, got {value!r}") from None
    if any(not math.isfinite(p) or p < 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"tensor split proportions must be numbers ≥ 0, got {value!r}"
        )
    return parts


MAX_GIB = float(1 << 20)
"""Largest memory size a flag takes, in GiB (1 PiB)."""


def _number(value: str, *, low: float, allow_low: bool, high: float = math.inf) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    too_low = number < low or (number == low and not allow_low)
    if not math.isfinite(number) or too_low or number > high:
        bound = f"≥ {low:g}" if allow_low else f"> {low:g}"
        upper = f" and at most {high:g}" if math.isfinite(high) else ""
        raise argparse.ArgumentTypeError(f"expected a number {bound}{upper}, got {value!r}")
    return number


def gib(value: str) -> float:
    """argparse type: a memory size in GiB, a finite number > 0 (at most 1 PiB)."""
    return _number(value, low=0.0, allow_low=False, high=MAX_GIB)


def positive_number(value: str) -> float:
    """argparse type: a finite number > 0 (seconds, tok/s, Gbit/s)."""
    return _number(value, low=0.0, allow_low=False)


def nonnegative_number(value: str) -> float:
    """argparse type: a finite number ≥ 0."""
    return _number(value, low=0.0, allow_low=True)


def add_settings_flags(p: argparse.ArgumentParser) -> None:
    """Add llama-server's settings flags and the runner/hardware options to ``p``."""
    g = p.add_argument_group("settings (llama-server's flags; unset = the runner's default)")
    g.add_argument(
        "-c",
        "--ctx-size",
        type=int,
        dest="n_ctx",
        metavar="N",
        help="context size in tokens, all slots together (0 = training context)",
    )
    g.add_argument(
        "-ngl",
        "--n-gpu-layers",
        "--gpu-layers",
        type=_ngl,
        dest="n_gpu_layers",
        metavar="N",
        help="layers on the GPU (the output layer counts); all/auto = all",
    )
    g.add_argument(
        "-ctk", "--cache-type-k", choices=CACHE_TYPES, dest="cache_type_k", help="K cache type"
    )
    g.add_argument(
        "-ctv",
        "--cache-type-v",
        choices=CACHE_TYPES,
        dest="cache_type_v",
        help="V cache type (quantized needs flash attention)",
    )
    g.add_argument(
        "-fa",
        "--flash-attn",
        choices=("on", "off", "auto"),
        dest="flash_attn",
        help="flash attention",
    )
    g.add_argument(
        "-np",
        "--parallel",
        type=int,
        dest="n_parallel",
        metavar="N",
        help="parallel sequences (slots)",
    )
    g.add_argument(
        "-kvu",
        "--kv-unified",
        action="store_const",
        const=True,
        dest="kv_unified",
        help="one KV buffer shared by all slots",
    )
    g.add_argument(
        "--no-kv-unified",
        action="store_const",
        const=False,
        dest="kv_unified",
        help="one KV buffer per slot",
    )
    g.add_argument(
        "--swa-full",
        action="store_const",
        const=True,
        dest="swa_full",
        help="full-size sliding-window cache",
    )
    g.add_argument(
        "--no-swa-full",
        action="store_const",
        const=False,
        dest="swa_full",
        help="window-sized sliding-window cache",
    )
    g.add_argument(
        "-b",
        "--batch-size",
        type=int,
        dest="n_batch",
        metavar="N",
        help="logical batch size in tokens",
    )
    g.add_argument(
        "-ub",
        "--ubatch-size",
        type=int,
        dest="n_ubatch",
        metavar="N",
        help="physical batch size in tokens",
    )
    g.add_argument(
        "-ncmoe",
        "--n-cpu-moe",
        type=int,
        dest="n_cpu_moe",
        metavar="N",
        help="keep the MoE experts of the first N layers on the CPU",
    )
    g.add_argument(
        "-ts",
        "--tensor-split",
        type=_tensor_split,
        dest="tensor_split",
        metavar="A,B",
        help="share of layers per GPU, e.g. 3,1",
    )
    g.add_argument(
        "--no-mmap",
        action="store_const",
        const=False,
        dest="use_mmap",
        help="load weights into memory instead of mapping the file",
    )
    g.add_argument(
        "-nkvo",
        "--no-kv-offload",
        action="store_const",
        const=False,
        dest="offload_kqv",
        help="keep the KV cache in system RAM",
    )
    h = p.add_argument_group("runner and hardware")
    h.add_argument(
        "--runner",
        choices=RUNNERS,
        default="llama-server",
        help="whose defaults fill unset flags (default: llama-server)",
    )
    h.add_argument(
        "--gpu-mem",
        type=gib,
        nargs="+",
        metavar="GiB",
        default=None,
        help="plan for GPUs of these sizes (one number per GPU)",
    )
    h.add_argument(
        "--ram",
        type=gib,
        metavar="GiB",
        default=None,
        help="plan for this much system RAM (default: this machine's)",
    )
    h.add_argument(
        "--profile",
        metavar="NAME[,NAME]",
        default=None,
        help='plan for hardware profiles, e.g. rtx-4090, m2-max:64GB or "2x rtx-3090 + '
        '64 GB DDR5" (ggtune hw --profiles lists them)',
    )


_SETTING_FIELDS = (
    "n_ctx",
    "n_gpu_layers",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "n_parallel",
    "kv_unified",
    "swa_full",
    "n_batch",
    "n_ubatch",
    "n_cpu_moe",
    "tensor_split",
    "use_mmap",
    "offload_kqv",
)


def settings_from_args(args: argparse.Namespace, hardware: Hardware) -> Settings:
    """Return the runner's defaults overridden by the flags the user gave."""
    runner: RunnerName = args.runner
    gpu_total = sum(g.capacity_bytes or 0 for g in hardware.gpus)
    base = runner_defaults(runner, gpu_total_bytes=gpu_total)
    given = {f: getattr(args, f) for f in _SETTING_FIELDS if getattr(args, f) is not None}
    if runner == "ollama" and "n_parallel" in given and "n_ctx" in given:
        # Ollama passes -c num_ctx*parallel: keep the user's per-slot meaning
        given["n_ctx"] = given["n_ctx"] * given["n_parallel"]
    if "n_batch" in given and "n_ubatch" not in given and runner == "ollama":
        given["n_ubatch"] = given["n_batch"]  # num_batch sets both -b and -ub
    if "n_parallel" in given and "kv_unified" not in given and runner == "llama-server":
        # setting -np turns llama-server's unified cache off (PR #16736)
        given["kv_unified"] = False
    return base.replace(**given)


def hardware_from_args(args: argparse.Namespace) -> Hardware:
    """Return this machine, or the GPUs/RAM the user asked to plan for."""
    from app.hardware.probe import local_hardware

    here = local_hardware()
    host = here.host
    gpus: tuple[Device, ...] = here.gpus
    if getattr(args, "profile", None):
        from ui.cli.hw import hardware_from_profile

        planned = hardware_from_profile(args.profile, here, gpu_mem_given=bool(args.gpu_mem))
        host, gpus = planned.host, planned.gpus
    if args.ram is not None:
        ram = int(args.ram * GIB)
        host = Device("CPU", "host", ram, ram, cpu_flags=host.cpu_flags)
    if args.gpu_mem:
        gpus = tuple(
            Device(f"CUDA{i}", "gpu", int(g * GIB), int(g * GIB))
            for i, g in enumerate(args.gpu_mem)
        )
    return Hardware(host=host, gpus=gpus)
