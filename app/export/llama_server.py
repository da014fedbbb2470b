"""llama-server: a command line for the pinned llama.cpp build, for POSIX shells and PowerShell.

The flags are those of ``common/arg.cpp`` in the llama.cpp that llama-cpp-python 0.3.36
vendors (commit 0c1e570, see docs/engine.md); :data:`FLAGS` lists every flag this module
can write, and a test checks each against that file. Flags change between builds
(``--no-mmap``/``--mlock`` became ``--load-mode``, PR #20834), so the command names the
build it is for.

Every setting is written explicitly, so the server runs exactly the settings given:
``-ngl`` as a number or ``all`` (``auto`` would let ``--fit`` choose), ``--fit off`` (fit
only adjusts what the user left unset, ``common/fit.cpp``), ``-np`` with ``-kvu`` or
``--no-kv-unified`` (an explicit ``-np`` turns the unified cache off, PR #16736).

Example::

    argv = llama_server_argv("/models/gemma.gguf", settings)
    shlex.join(argv)      # llama-server -m /models/gemma.gguf -c 8192 -ngl all …
    powershell_join(argv)
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from typing import Final

from app.export.common import ExportText, powershell_join
from app.settings import ALL_LAYERS, Settings

__all__ = ["FLAGS", "LLAMA_CPP_BUILD", "export_llama_server", "llama_server_argv"]

LLAMA_CPP_BUILD: Final = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
"""The llama.cpp commit these flags were checked against (llama-cpp-python 0.3.36)."""

FLAGS: Final = (
    "-m",
    "-c",
    "-ngl",
    "-fa",
    "-ctk",
    "-ctv",
    "-np",
    "-kvu",
    "--no-kv-unified",
    "-b",
    "-ub",
    "-ncmoe",
    "-ts",
    "--swa-full",
    "--load-mode",
    "-nkvo",
    "--no-repack",
    "--fit",
    "-t",
    "-md",
    "--spec-type",
    "-ngld",
    "--host",
    "--port",
    "-cram",
    "-ctxcp",
    "--mmproj",
    "--no-mmproj-offload",
)
"""Every flag :func:`llama_server_argv` may write (each exists in the pinned arg.cpp)."""


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def llama_server_argv(
    model_path: str | os.PathLike[str],
    settings: Settings,
    *,
    program: str = "llama-server",
    draft_path: str | os.PathLike[str] | None = None,
    draft_gpu_layers: int | None = None,
    n_threads: int | None = None,
    host: str | None = None,
    port: int | None = None,
    mmproj_path: str | os.PathLike[str] | None = None,
    mmproj_offload: bool = True,
    cache_ram_mib: int | None = None,
    ctx_checkpoints: int | None = None,
) -> tuple[str, ...]:
    """Return the argument vector that starts llama-server with exactly ``settings``.

    ``settings.n_ctx`` is all cells (``-c``), split over ``-np`` slots unless unified.
    A draft model adds ``-md FILE --spec-type draft-simple`` (without a type the draft
    loads but never runs, llama.cpp #25345). ``mmproj_path`` adds ``--mmproj FILE``
    (``--no-mmproj-offload`` unless offloaded); ``cache_ram_mib`` / ``ctx_checkpoints``
    write ``-cram`` / ``-ctxcp`` (None: the server's defaults, 8192 MiB and 32).
    """
    s = settings
    argv: list[str] = [program, "-m", os.fspath(model_path)]
    argv += ["-c", str(s.n_ctx)]
    argv += ["-ngl", "all" if s.n_gpu_layers == ALL_LAYERS else str(s.n_gpu_layers)]
    argv += ["--fit", "off"]
    argv += ["-fa", s.flash_attn]
    argv += ["-ctk", s.cache_type_k, "-ctv", s.cache_type_v]
    argv += ["-np", str(s.n_parallel), "-kvu" if s.kv_unified else "--no-kv-unified"]
    argv += ["-b", str(s.n_batch), "-ub", str(s.n_ubatch)]
    if s.swa_full:
        argv.append("--swa-full")  # no negative form; the server's default is off
    if s.n_cpu_moe:
        argv += ["-ncmoe", str(s.n_cpu_moe)]
    if s.tensor_split:
        argv += ["-ts", ",".join(_number(p) for p in s.tensor_split)]
    if not s.use_mmap:
        argv += ["--load-mode", "none"]
    if not s.offload_kqv:
        argv.append("-nkvo")
    if not s.repack:
        argv.append("--no-repack")
    if n_threads is not None:
        argv += ["-t", str(n_threads)]
    if draft_path is not None:
        argv += ["-md", os.fspath(draft_path), "--spec-type", "draft-simple"]
        if draft_gpu_layers is not None:
            argv += ["-ngld", "all" if draft_gpu_layers == ALL_LAYERS else str(draft_gpu_layers)]
    if mmproj_path is not None:
        argv += ["--mmproj", os.fspath(mmproj_path)]
        if not mmproj_offload:
            argv.append("--no-mmproj-offload")
    if cache_ram_mib is not None:
        argv += ["-cram", str(cache_ram_mib)]
    if ctx_checkpoints is not None:
        argv += ["-ctxcp", str(ctx_checkpoints)]
    if host is not None:
        argv += ["--host", host]
    if port is not None:
        argv += ["--port", str(port)]
    return tuple(argv)


def export_llama_server(
    model_path: str | os.PathLike[str],
    settings: Settings,
    *,
    windows: bool = False,
    draft_path: str | os.PathLike[str] | None = None,
    n_threads: int | None = None,
    fitting: Sequence[str] = (),
    mmproj_path: str | os.PathLike[str] | None = None,
    mmproj_offload: bool = True,
    cache_ram_mib: int | None = None,
    ctx_checkpoints: int | None = None,
) -> ExportText:
    """Return the llama-server command line as a script for POSIX shells or PowerShell;
    ``fitting`` are comment lines (what the server's own ``--fit`` would choose)."""
    argv = llama_server_argv(
        model_path,
        settings,
        draft_path=draft_path,
        n_threads=n_threads,
        mmproj_path=mmproj_path,
        mmproj_offload=mmproj_offload,
        cache_ram_mib=cache_ram_mib,
        ctx_checkpoints=ctx_checkpoints,
    )
    comments = "".join(f"# {line}\n" for line in fitting)
    if windows:
        line = powershell_join(argv)
        text = (
            f"# llama-server for llama.cpp {LLAMA_CPP_BUILD[:7]} (PowerShell)\n{comments}{line}\n"
        )
        return ExportText(text=text, filename="llama-server.ps1")
    line = shlex.join(argv)
    text = f"#!/bin/sh\n# llama-server for llama.cpp {LLAMA_CPP_BUILD[:7]}\n{comments}exec {line}\n"
    return ExportText(text=text, filename="llama-server.sh")
