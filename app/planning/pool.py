"""A plan over several machines as scripts: one ``ggml-rpc-server`` script per remote machine
and the ``llama-server --rpc`` script for this one.

:func:`pool_scripts` turns a :class:`~app.planning.goals.Recommendation` with an RPC plan
into :class:`~app.export.common.ExportText` files (POSIX shell, or PowerShell with
``windows``): each remote's script starts the server exactly as the plan's
``remote_commands`` say, with comments on what it lends, what loading sends it and its
cache on disk; the main script is :func:`app.planning.planner.server_argv`. ``ggtune
recommend … --write-scripts DIR`` writes them (atomically, never over a file unasked).

Example::

    for script in pool_scripts("/models/llama-70b.gguf", rec):
        write_text_atomic(folder / script.filename, script.text)
"""

from __future__ import annotations

import re
import shlex
from typing import Final

from app.errors import PlanError
from app.export.common import ExportText, powershell_join
from app.export.llama_server import LLAMA_CPP_BUILD
from app.planning.goals import Recommendation
from app.planning.planner import server_argv
from app.planning.words import RPC_SECURITY_NOTE
from app.units import format_bytes

__all__ = ["pool_scripts"]

CACHE_FOLDER: Final = "$LLAMA_CACHE/rpc (default ~/.cache/llama.cpp/rpc)"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "machine"


def _script(argv: tuple[str, ...], comments: list[str], name: str, windows: bool) -> ExportText:
    head = "".join(f"# {line}\n" for line in comments)
    if windows:
        return ExportText(f"{head}{powershell_join(argv)}\n", f"{name}.ps1")
    return ExportText(f"#!/bin/sh\n{head}exec {shlex.join(argv)}\n", f"{name}.sh")


def pool_scripts(
    model_path: str, rec: Recommendation, *, windows: bool = False
) -> tuple[ExportText, ...]:
    """Return the scripts that start the plan ``rec``: each remote machine's, then this one's.

    Raise :class:`~app.errors.PlanError` when ``rec`` is not a plan over several machines
    or nothing fits.
    """
    rpc, best = rec.rpc, rec.best
    if rpc is None or best is None:
        raise PlanError("no plan over several machines to write (nothing fits, or no --rpc-host)")
    build = LLAMA_CPP_BUILD[:7]
    machines = {m.machine: m for m in rpc.machines}
    out = []
    for host, argv in zip(rpc.hosts, rpc.remote_commands, strict=True):
        m = machines.get(host.endpoint)
        lent = ", ".join(m.devices) if m is not None else "its devices"
        comments = [
            f"ggml-rpc-server for llama.cpp {build}: run it on {host.endpoint}"
            + (f" ({host.label})" if host.label else ""),
            f"it lends {lent} to the plan for {model_path}",
        ]
        if m is not None:
            comments.append(
                f"{m.n_layers} layers, {format_bytes(m.total_bytes)} of "
                f"{format_bytes(m.capacity_bytes)}; loading sends it {format_bytes(m.load_bytes)}"
                f", later loads {format_bytes(m.reload_bytes)} (-c keeps the rest in "
                f"{CACHE_FOLDER}: {format_bytes(m.load_bytes - m.reload_bytes)} on its disk)"
            )
        comments.append(RPC_SECURITY_NOTE)
        name = f"rpc-server-{_safe(host.endpoint)}"
        out.append(_script(argv, comments, name, windows))
    main = server_argv(model_path, rec)
    comments = [
        f"llama-server for llama.cpp {build}: run it on this machine once every "
        f"ggml-rpc-server answers ({rpc.rpc_arg})",
        f"-ts pins the planned layers per device; the network costs ~"
        f"{rpc.network_s_per_token * 1000:.2f} ms per token at {rpc.link.gbit_per_s:g} Gbit/s",
    ]
    out.append(_script(main, comments, "llama-server", windows))
    return tuple(out)
