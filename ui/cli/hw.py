"""``ggtune hw``: what ggtune and llama.cpp see of this machine, and the hardware profiles.

``ggtune hw`` runs every hardware probe (measuring the host's memory bandwidth once, then
reading it from the cache), asks llama.cpp for its device list in a child process, and
prints what was found, what could not be found and why, and the devices the estimator
will use. ``--json`` prints the same as one object. ``ggtune hw --profiles`` lists the
hardware profiles; ``ggtune hw --profile "2x rtx-3090 + 64 GB DDR5"`` shows a composition
as the estimator would see it.

The user's other machines, lent to plans over llama.cpp's RPC backend, are remembered here
too (:mod:`app.planning.machines`): ``--rpc-add HARDWARE@HOST:PORT [--rpc-name NAME]``,
``--rpc-remove``, ``--rpc-off``/``--rpc-on``, ``--rpc-list``; ``ggtune recommend/plan
--rpc-saved`` plans with the ones that are on.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from app.errors import EngineError, GGTuneError, HardwareProfileError, StateFileError
from app.hardware.devices import Hardware
from app.hardware.probe import detect, local_hardware
from app.hardware.profiles import ProfileSet, compose, load_profiles
from app.hardware.report import HardwareReport
from app.units import format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.output import EXIT_USAGE


def hardware_from_profile(text: str, here: Hardware, *, gpu_mem_given: bool = False) -> Hardware:
    """Return the hardware ``--profile`` describes; the host is this machine's unless given.

    ``this`` in the composition stands for ``here`` (e.g. "this + rtx-3090").
    """
    if gpu_mem_given:
        raise HardwareProfileError("--profile and --gpu-mem both describe the GPUs; give one")
    return compose(text, default_host=here.host, this_machine=lambda: here)


def register(sub: Any) -> None:
    """Add the ``hw`` subcommand to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("hw", help=COMMANDS["hw"].help)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--no-engine",
        action="store_true",
        help="do not ask llama.cpp for its devices (skips starting a child process)",
    )
    p.add_argument(
        "--remeasure", action="store_true", help="measure the host's memory bandwidth again"
    )
    p.add_argument("--profiles", action="store_true", help="list the hardware profiles")
    p.add_argument(
        "--profile",
        metavar="NAME[,NAME]",
        help='show a profile or a composition, e.g. "2x rtx-3090 + 64 GB DDR5"',
    )
    m = p.add_argument_group("other machines, lent over llama.cpp's RPC backend (remembered)")
    m.add_argument(
        "--rpc-add",
        metavar="HARDWARE@HOST:PORT",
        help="remember a machine running ggml-rpc-server, e.g. rtx-3060-12g@192.168.1.20:50052 "
        "or '32 GB@192.168.1.21:50052' (no GPU: it lends its RAM); plans use it with --rpc-saved",
    )
    m.add_argument("--rpc-name", metavar="NAME", default="", help="a name for --rpc-add")
    m.add_argument("--rpc-remove", metavar="HOST:PORT|NAME", help="forget a machine")
    m.add_argument("--rpc-off", metavar="HOST:PORT|NAME", help="keep it, but plan without it")
    m.add_argument("--rpc-on", metavar="HOST:PORT|NAME", help="plan with it again")
    m.add_argument("--rpc-list", action="store_true", help="list the remembered machines")
    p.set_defaults(handler=run_hw)


# --- data ------------------------------------------------------------------------------


def _engine_view() -> dict[str, Any]:
    from runner.devices import engine_facts

    try:
        facts = engine_facts()
    except EngineError as err:
        return {"error": str(err)}
    return {
        "engine_version": facts.engine_version,
        "system_info": facts.system_info,
        "devices": [asdict(d) for d in facts.devices],
    }


def _name_notes(hardware: Hardware, engine: dict[str, Any] | None) -> list[str]:
    """Say where ggtune's device names and llama.cpp's differ."""
    if not engine or "devices" not in engine:
        return []
    names = {d["name"] for d in engine["devices"]}
    notes = []
    for g in hardware.gpus:
        if g.name not in names:
            notes.append(
                f"{g.name} ({g.description}) is not among llama.cpp's devices "
                f"({', '.join(sorted(names))}): this llama.cpp build lacks its backend, so a "
                "model would run on the CPU here"
            )
    return notes


def hw_dict(report: HardwareReport, engine: dict[str, Any] | None) -> dict[str, Any]:
    """Return what ``ggtune hw --json`` prints; the key names are a stable interface."""
    hardware = report.to_hardware()
    return {
        **report.to_dict(),
        "engine": engine,
        "hardware": {
            "host": asdict(hardware.host),
            "gpus": [asdict(g) for g in hardware.gpus],
        },
        "notes": _name_notes(hardware, engine),
    }


def profiles_dict(profiles: ProfileSet | None = None) -> list[dict[str, Any]]:
    """Return every profile (built-in and the user's) as plain data."""
    return [
        {
            "id": p.id,
            "name": p.name,
            "kind": p.kind,
            "backend": p.backend,
            "aliases": list(p.aliases),
            "memory_gib": asdict(p.memory_gib),
            "bandwidth_gb_per_s": asdict(p.bandwidth_gb_per_s),
            "usable_fraction": asdict(p.usable_fraction),
            "fp16_tflops": asdict(p.fp16_tflops),
            "int8_tops": asdict(p.int8_tops) if p.int8_tops is not None else None,
            "file": p.path,
        }
        for p in (profiles if profiles is not None else load_profiles())
    ]


# --- printing --------------------------------------------------------------------------


def _num(x: float | None, unit: str, fmt: str = ".1f") -> str:
    return "unknown" if x is None else f"{x:{fmt}} {unit}"


def _print_hardware(hardware: Hardware) -> None:
    for d in hardware.devices:
        extra = " (unified memory)" if d.unified_memory else ""
        print(
            f"  {d.name:<8} {d.kind:<4} {d.description or ''}{extra}\n"
            f"           capacity {format_bytes(d.capacity_bytes, 2)}, "
            f"free {format_bytes(d.free_bytes, 2)}, "
            f"bandwidth {_num(d.bandwidth_gb_per_s, 'GB/s')}, "
            f"FP16 {_num(d.fp16_tflops, 'TFLOPS')}"
            + (f", flags {' '.join(d.cpu_flags)}" if d.cpu_flags else "")
        )


def _print_report(data: dict[str, Any], report: HardwareReport) -> None:
    h = report.host
    print("host")
    if h is None:
        print(f"  unknown: {report.status('host').detail}")
    else:
        print(f"  CPU        {h.cpu_model or 'unknown'} ({h.system} {h.machine})")
        print(
            f"  cores      {h.physical_cores or 'unknown'} physical, "
            f"{h.logical_cores or 'unknown'} logical"
        )
        print(f"  ISA flags  {' '.join(h.cpu_flags) or 'none that matter to llama.cpp'}")
        print(
            f"  RAM        {format_bytes(h.ram_total_bytes, 2)} "
            f"({format_bytes(h.ram_available_bytes, 2)} available)"
        )
        print(
            f"  swap       {format_bytes(h.swap_total_bytes, 2)} "
            f"({format_bytes(h.swap_free_bytes, 2)} free)"
        )
    bw = report.host_bandwidth
    if bw is not None:
        how = "cached" if bw.cached else "measured now"
        print(
            f"  bandwidth  {bw.gb_per_s:.1f} GB/s ({how}, {bw.measured_at}; numpy copy, "
            f"{bw.threads} threads)"
        )
    else:
        print(f"  bandwidth  unknown: {report.status('host bandwidth').detail}")
    print("GPUs")
    if not report.gpus:
        print("  none found")
    for g in report.gpus:
        pci = f", {g.pci_id}" if g.pci_id else ""
        print(f"  {g.engine_name or '-':<8} {g.name} [{g.vendor}{pci}]")
        print(
            f"           memory {format_bytes(g.total_bytes, 2)}, "
            f"free {format_bytes(g.free_bytes, 2)}"
            + (
                f", usable {format_bytes(g.usable_bytes, 2)} ({g.usable_source})"
                if g.usable_bytes
                else ""
            )
        )
        bw_text = _num(g.bandwidth_gb_per_s, "GB/s")
        if g.bandwidth_source:
            bw_text += f" ({g.bandwidth_source})"
        print(f"           bandwidth {bw_text}, FP16 {_num(g.fp16_tflops, 'TFLOPS')}")
        facts = [
            f"compute capability {g.compute_capability}" if g.compute_capability else "",
            f"driver {g.driver_version}" if g.driver_version else "",
            f"CUDA {g.cuda_version}" if g.cuda_version else "",
            f"MIG {'on' if g.mig_enabled else 'off'}" if g.mig_enabled is not None else "",
            f"{g.gpu_cores} GPU cores" if g.gpu_cores else "",
        ]
        if any(facts):
            print("           " + ", ".join(f for f in facts if f))
        for p in g.processes:
            print(f"           process {p.pid} {p.name or '?'}: {format_bytes(p.used_bytes, 2)}")
        for note in g.notes:
            print(f"           note: {note}")
    print("probes")
    for s in report.statuses:
        print(f"  {s.probe:<15} {s.state:<8} {s.detail}")
    engine = data.get("engine")
    if engine is not None:
        if "error" in engine:
            print(f"llama.cpp devices: unknown: {engine['error']}")
        else:
            print(f"llama.cpp devices ({engine['engine_version']})")
            for d in engine["devices"]:
                print(
                    f"  {d['name']:<8} {d['type']:<5} {d['description']}: "
                    f"{format_bytes(d['free_bytes'], 2)} free of "
                    f"{format_bytes(d['total_bytes'], 2)}"
                )
    print("as the estimator sees it")
    _print_hardware(report.to_hardware())
    for note in data["notes"]:
        print(f"note: {note}")


def _print_profiles(rows: list[dict[str, Any]]) -> None:
    print(f"{'id':<26} {'kind':<8} {'memory':>8} {'GB/s':>7} {'usable':>7} {'FP16 TF':>8}  name")
    for r in rows:
        fp16 = r["fp16_tflops"]["value"]
        print(
            f"{r['id']:<26} {r['kind']:<8} {r['memory_gib']['value']:>6g} G "
            f"{r['bandwidth_gb_per_s']['value']:>7g} {r['usable_fraction']['value']:>7.3f} "
            f"{'?' if fp16 is None else f'{fp16:g}':>8}  {r['name']}"
        )
    print(f"{len(rows)} profiles; sources: ggtune hw --profiles --json")


# --- entry point -----------------------------------------------------------------------


def _machines_dict() -> list[dict[str, Any]]:
    from app.planning.machines import load_machines

    rows = []
    for m in load_machines():
        try:
            hw = m.host().hardware
            devices = [
                {"name": d.name, "kind": d.kind, "capacity_bytes": d.capacity_bytes,
                 "description": d.description}
                for d in (hw.gpus or (hw.host,))
            ]  # fmt: skip
            problem = None
        except HardwareProfileError as err:
            devices, problem = [], str(err)
        rows.append(
            {"endpoint": m.endpoint, "hardware": m.hardware, "name": m.name,
             "enabled": m.enabled, "devices": devices, "problem": problem}
        )  # fmt: skip
    return rows


def _print_machines(rows: list[dict[str, Any]]) -> None:
    from app.planning.machines import machines_path

    print(f"other machines (llama.cpp RPC; {machines_path()})")
    if not rows:
        print("  none: ggtune hw --rpc-add HARDWARE@HOST:PORT")
    for r in rows:
        use = "planned with" if r["enabled"] else "off"
        name = f" ({r['name']})" if r["name"] else ""
        offers = ", ".join(
            f"{d['description'] or d['name']} {format_bytes(d['capacity_bytes'])}"
            for d in r["devices"]
        )
        print(f"  {r['endpoint']}{name}: {r['hardware']} — lends {offers or '?'}; {use}")
        if r["problem"]:
            print(f"    cannot be planned with: {r['problem']}")


def _run_machines(args: argparse.Namespace) -> int | None:
    """Handle the --rpc-* options; None when none was given."""
    from app.planning import machines

    if args.rpc_add:
        machines.add_machine(machines.parse_machine(args.rpc_add, name=args.rpc_name))
    elif args.rpc_remove:
        machines.remove_machine(args.rpc_remove)
    elif args.rpc_off or args.rpc_on:
        machines.set_enabled(args.rpc_off or args.rpc_on, enabled=not args.rpc_off)
    elif not args.rpc_list:
        if args.rpc_name:
            raise GGTuneError("--rpc-name goes with --rpc-add")
        return None
    rows = _machines_dict()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_machines(rows)
    return 0


def run_hw(args: argparse.Namespace) -> int:
    """Run ``ggtune hw``; return the exit code."""
    done = _run_machines(args)
    if done is not None:
        return done
    if args.profiles:
        profiles = load_profiles()
        rows = profiles_dict(profiles)
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_profiles(rows)
        for issue in profiles.issues:  # the good ones are listed; the broken ones named
            print(f"ggtune: skipped {issue}", file=sys.stderr)
        return EXIT_USAGE if profiles.issues else 0
    if args.profile:
        hardware = hardware_from_profile(args.profile, local_hardware())
        if args.json:
            print(
                json.dumps(
                    {"host": asdict(hardware.host), "gpus": [asdict(g) for g in hardware.gpus]},
                    indent=2,
                )
            )
        else:
            print(f"{args.profile} as the estimator sees it")
            _print_hardware(hardware)
        return 0
    report = detect(measure_bandwidth=True, refresh_bandwidth=args.remeasure)
    engine = None if args.no_engine else _engine_view()
    data = hw_dict(report, engine)
    try:
        data["rpc_machines"] = _machines_dict()
    except StateFileError as err:  # shown, never fatal to the report
        data["rpc_machines"] = {"error": str(err)}
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_report(data, report)
        if isinstance(data["rpc_machines"], list):
            _print_machines(data["rpc_machines"])
        else:
            print(f"other machines: {data['rpc_machines']['error']}")
    return 0
