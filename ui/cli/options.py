"""What the commands share on the way in: the parser, the settings flags, the hardware and
the model a command plans for.

Settings flags use llama-server's names and meanings so users can paste what they know;
flags not given take the chosen runner's defaults.
"""

from __future__ import annotations

import argparse
import math

from app.hardware.devices import Device, Hardware, planned_hardware
from app.model.projector import Projector, read_projector
from app.model.spec import ModelSpec
from app.planning.llama_fit import DEFAULT_FIT_CTX
from app.planning.runner_plan import RunnerOptions, RunnerPlan, plan_runner
from app.predict.estimate import safe_repack
from app.settings import CACHE_TYPES, RUNNERS, RunnerName, Settings, runner_defaults
from app.units import GIB


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


def _mib_list(value: str) -> tuple[int, ...]:
    try:
        parts = tuple(int(p) for p in value.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected MiB like 1024 or 1024,2048, got {value!r}"
        ) from None
    if any(p < 0 for p in parts):
        raise argparse.ArgumentTypeError("fit targets must be ≥ 0 MiB")
    return parts


def add_settings_flags(p: argparse.ArgumentParser) -> None:
    """Add llama-server's settings flags and the runner/hardware options to ``p``."""
    g = p.add_argument_group("settings (llama-server's flags; unset = the runner's default)")
    g.add_argument(
        "-c",
        "--ctx-size",
        "--ctx",
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
        "-nr",
        "--no-repack",
        action="store_const",
        const=False,
        dest="repack",
        help="no AMX/CPU_REPACK copy of the weights (llama-server --no-repack)",
    )
    g.add_argument(
        "--repack",
        action="store_const",
        const=True,
        dest="repack",
        help="let llama.cpp repack weights for this CPU (the default but on AMX CPUs)",
    )
    g.add_argument(
        "-nkvo",
        "--no-kv-offload",
        action="store_const",
        const=False,
        dest="offload_kqv",
        help="keep the KV cache in system RAM",
    )
    r = p.add_argument_group(
        "the runner's own choices (llama-server's flags; Ollama and LM Studio run it)"
    )
    r.add_argument(
        "-fit",
        "--fit",
        type=_on_off,
        dest="fit",
        metavar="on|off",
        help="llama.cpp fits unset settings to free memory (default on)",
    )
    r.add_argument(
        "-fitt",
        "--fit-target",
        type=_mib_list,
        dest="fit_target_mib",
        metavar="MiB[,MiB]",
        help="memory --fit leaves free per device (default 1024)",
    )
    r.add_argument(
        "-fitc",
        "--fit-ctx",
        type=int,
        dest="fit_ctx",
        metavar="N",
        help="least context --fit may shrink an unset -c to (default 4096)",
    )
    r.add_argument(
        "-cram",
        "--cache-ram",
        type=int,
        dest="cache_ram_mib",
        metavar="MiB",
        help="host prompt cache limit (default 8192; -1 no limit, 0 off)",
    )
    r.add_argument(
        "-ctxcp",
        "--ctx-checkpoints",
        type=int,
        dest="ctx_checkpoints",
        metavar="N",
        help="context checkpoints kept per slot (default 32)",
    )
    r.add_argument(
        "-mm",
        "--mmproj",
        dest="mmproj",
        metavar="FILE",
        help="a vision/audio projector (default: an mmproj*.gguf found beside the model)",
    )
    r.add_argument(
        "--no-mmproj",
        action="store_true",
        dest="no_mmproj",
        help="plan without a projector even if one is found",
    )
    r.add_argument(
        "--no-mmproj-offload",
        action="store_const",
        const=False,
        dest="mmproj_offload",
        help="keep the projector in system RAM",
    )
    h = p.add_argument_group("runner and hardware")
    h.add_argument(
        "--runner",
        choices=RUNNERS,
        default=None,
        help="whose defaults and own fitting fill unset flags (default: llama-server; "
        "export: the runner exported for)",
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
    "repack",
)


def runner_of(args: argparse.Namespace) -> RunnerName:
    """Return the runner the user chose (``--runner``), llama-server when none."""
    runner: RunnerName = getattr(args, "runner", None) or "llama-server"
    return runner


def given_from_args(args: argparse.Namespace) -> dict[str, object]:
    """Return the settings the user set, in llama.cpp's terms (Ollama's -c is per slot)."""
    runner = runner_of(args)
    given = {f: getattr(args, f) for f in _SETTING_FIELDS if getattr(args, f, None) is not None}
    if runner == "ollama" and "n_parallel" in given and "n_ctx" in given:
        # Ollama passes -c num_ctx*parallel: keep the user's per-slot meaning
        given["n_ctx"] = given["n_ctx"] * given["n_parallel"]
    if "n_batch" in given and "n_ubatch" not in given and runner == "ollama":
        given["n_ubatch"] = given["n_batch"]  # num_batch sets both -b and -ub
    return given


def settings_from_args(args: argparse.Namespace, hardware: Hardware) -> Settings:
    """Return the runner's defaults overridden by the flags the user gave (before the
    runner's own fitting; :func:`plan_from_args` has what it will run)."""
    runner = runner_of(args)
    gpu_total = sum(g.capacity_bytes or 0 for g in hardware.gpus)
    base = runner_defaults(runner, gpu_total_bytes=gpu_total)
    given = given_from_args(args)
    if "n_parallel" in given and "kv_unified" not in given and runner == "llama-server":
        # setting -np turns llama-server's unified cache off (PR #16736)
        given["kv_unified"] = False
    settings = base.replace(**given)
    if runner == "llama-server":  # as the runner's plan (app/planning/runner_plan.py)
        settings = safe_repack(settings, hardware.host, given)
    return settings


def options_from_args(args: argparse.Namespace) -> RunnerOptions:
    """Return the runner knobs the user set (fit, prompt cache, checkpoints, projector)."""
    fit = getattr(args, "fit", None)
    fit_ctx = getattr(args, "fit_ctx", None)
    return RunnerOptions(
        fit=True if fit is None else fit,
        fit_target_mib=getattr(args, "fit_target_mib", None) or (),
        fit_ctx=DEFAULT_FIT_CTX if fit_ctx is None else fit_ctx,
        cache_ram_mib=getattr(args, "cache_ram_mib", None),
        ctx_checkpoints=getattr(args, "ctx_checkpoints", None),
        mmproj_offload=getattr(args, "mmproj_offload", None),
    )


def projector_from_args(args: argparse.Namespace, model: str) -> Projector | None:
    """Return the projector to budget: ``--mmproj``, else one found for the model file."""
    from app.model.catalog_names import is_catalog
    from app.sources.refs import is_url

    if getattr(args, "no_mmproj", False):
        return None
    given = getattr(args, "mmproj", None)
    if given:
        return read_projector(given, source="--mmproj")
    if is_catalog(model) or is_url(model):
        return None
    from app.sources.projectors import find_projector

    found = find_projector(model)
    if found is None:
        return None
    return read_projector(found[0], source=found[1])


def plan_from_args(
    args: argparse.Namespace,
    spec: ModelSpec,
    hardware: Hardware,
    *,
    model: str | None = None,
    draft: ModelSpec | None = None,
) -> RunnerPlan:
    """Return what the chosen runner will run: its defaults, the flags given, its fitting."""
    projector = projector_from_args(args, model if model is not None else spec.path)
    return plan_runner(
        spec,
        runner_of(args),
        hardware,
        given=given_from_args(args),
        options=options_from_args(args),
        projector=projector,
        draft=draft,
    )


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
    return planned_hardware(
        Hardware(host=host, gpus=gpus),
        gpu_bytes=[int(g * GIB) for g in args.gpu_mem] if args.gpu_mem else None,
        ram_bytes=None if args.ram is None else int(args.ram * GIB),
    )
