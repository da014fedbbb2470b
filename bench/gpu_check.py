"""The GPU check: estimate vs llama.cpp per device on a real NVIDIA GPU, one short run.

Issue 14 point 4. The estimate's rules for CUDA devices (app/predict/graph/compute.py:
128-byte buffers, weights streamed to the GPU for the prompt matmuls of CPU layers, padded
quantized rows, f16 copies that flash attention makes of a quantized cache) are read from
the vendored ggml-cuda source but were checked on RPC devices only; this script measures
them on a GPU machine lent for a few minutes. It has three commands:

``prepare`` (here, in the checkout that travels)
    Writes ``.gpucheck/`` (git-ignored through ``.git/info/exclude``): the pinned
    llama-cpp-python sdist without what a CUDA build does not read (other backends, docs,
    model vocabularies, tests), the pure-Python wheels the GPU image lacks (gguf,
    platformdirs, diskcache) and the header bytes of both demo models. About 15 MiB.
    A CUDA wheel fetched from an earlier run and put in ``.gpucheck/cuda-wheel/`` by
    ``adopt`` is used instead of building again.

``run`` (on the GPU machine, ``--out $OUT``; nothing there reaches the network)
    Installs a carried CUDA wheel, or builds one from that sdist for the machine's own
    GPU (``GGML_CUDA=ON``, ``CMAKE_CUDA_ARCHITECTURES=native``, no RPC, no multimodal
    library; pip with ``--no-index --no-build-isolation``, using the image's CMake, ninja
    and scikit-build-core) and installs it under /tmp, then runs the grid: header
    stand-ins of catalog models (llama-3.1-8b, qwen3-30b-a3b, gemma-3-27b, gpt-oss-20b,
    simulated at Q4_K_M: real shapes and types, zero weights) and of both demo models,
    then the tiny zoo models; each really loaded by llama.cpp (``alloc``, mmap off: every
    buffer per device) at 8192 tokens with all, half and none of the layers on CUDA0,
    flash attention on and off, a q8_0 cache and four slots. Results go to
    ``$OUT/gpu_check.json`` after every model, so a run cut short still brings back what
    it measured; no model is started after 9.5 minutes. ``$OUT/gpu_check.md`` is the
    table, ``$OUT/build.log`` the build's tail, and the wheel comes back too when it is
    under 16 MiB. Budget: the build about 5-7 min on 16 cores for one architecture, the
    grid 2-4 min; ``--skip-build`` reuses a wheel a previous run left in /tmp on a
    machine still warm.

``adopt WHEEL`` (here)
    Keeps the wheel a run brought back in ``.gpucheck/cuda-wheel/``: the next run carries
    it and skips the build (then the whole grid fits the 10 minutes).

``write RESULTS.json`` (here, after the run)
    Puts the table into docs/benchmarks.md (section ``gpu``), with the machine and date.

How to run it (only a session whose task is lent a GPU machine; see the device tool):

    python3 bench/gpu_check.py prepare
    # device run: command "PYTHONUNBUFFERED=1 python3 bench/gpu_check.py run --out $OUT",
    #             carry [".gpucheck"], timeout_s 600
    python3 bench/gpu_check.py write /path/to/fetched/gpu_check.json

``run --local [--model NAME ...]`` runs the same grid on this machine's installed wheel
(CPU, or whatever backend it was built for) to check the script itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PREP = ROOT / ".gpucheck"
WORK = Path("/tmp/gpucheck")
SDIST_NAME = "llama_cpp_python-0.3.36"
MIB = 1024 * 1024

# what a CUDA build of llama-cpp-python does not read: in the sdist ...
_DROP_TOP = (".git", "examples", "docs", "tests")
# ... and in vendor/llama.cpp/
_DROP = (
    ".github",
    "examples",
    "pocs",
    "tools/ui",
    "tools/server",
    "docs",
    "models",
    "media",
    "benches",
    "tests",
    "gguf-py",
    "conversion",
    "scripts",
    "ggml/src/ggml-vulkan",
    "ggml/src/ggml-metal",
    "ggml/src/ggml-sycl",
    "ggml/src/ggml-opencl",
    "ggml/src/ggml-hexagon",
    "ggml/src/ggml-cann",
    "ggml/src/ggml-et",
    "ggml/src/ggml-openvino",
    "ggml/src/ggml-webgpu",
    "ggml/src/ggml-virtgpu",
    "ggml/src/ggml-zdnn",
    "ggml/src/ggml-zendnn",
    "ggml/src/ggml-musa",
)

CATALOG = ("llama-3.1-8b", "qwen3-30b-a3b", "gemma-3-27b", "gpt-oss-20b")
ZOO_MODELS = ("llama", "gemma3", "qwen3moe", "gpt-oss", "deepseek2", "granitehybrid", "mamba2")


def say(text: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- prepare (here) ---------------------------------------------------------------------


def _sdist_tarball() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ggtune" / "sdist"
    candidate = cache / f"{SDIST_NAME}.tar.gz"
    if candidate.is_file():
        return candidate
    target = cache
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(target),
            "llama-cpp-python==0.3.36",
        ],
        check=True,
    )
    return target / f"{SDIST_NAME}.tar.gz"


def _keep(name: str) -> bool:
    parts = name.split("/", 3)
    if len(parts) >= 2 and parts[1] in _DROP_TOP:
        return False
    if len(parts) < 3 or parts[1] != "vendor" or not parts[2].startswith("llama.cpp"):
        return True
    inner = name.split("vendor/llama.cpp/", 1)[-1]
    return not any(inner == d or inner.startswith(d + "/") for d in _DROP)


def prepare() -> None:
    """Write .gpucheck/ for the device run (see the module doc)."""
    PREP.mkdir(exist_ok=True)
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--git-path", "info/exclude"],
        capture_output=True,
        text=True,
    )
    if git.returncode == 0:  # in a worktree the exclude file is the common one's
        exclude = Path(git.stdout.strip())
        if not exclude.is_absolute():
            exclude = ROOT / exclude
        exclude.parent.mkdir(parents=True, exist_ok=True)
        if not exclude.is_file() or "/.gpucheck/" not in exclude.read_text():
            with exclude.open("a") as f:
                f.write("\n/.gpucheck/\n")
    source = _sdist_tarball()
    out = PREP / f"{SDIST_NAME}-cuda.tar.xz"
    say(f"trimming {source.name} -> {out.name}")
    with tarfile.open(source) as src, tarfile.open(out, "w:xz") as dst:
        for member in src:
            if _keep(member.name):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    wheels = PREP / "wheels"
    wheels.mkdir(exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(wheels),
            "gguf==0.19.0",
            "platformdirs~=4.3",
            "diskcache~=5.6",
        ],
        check=True,
    )
    from app.model.standin import file_prefix
    from app.sources.demo_models import ensure_demo_models

    models = ensure_demo_models()
    heads = PREP / "headers"
    heads.mkdir(exist_ok=True)
    for name, path in (("gemma", models.gemma), ("smollm", models.smollm)):
        prefix, size = file_prefix(path)
        (heads / f"{name}.prefix").write_bytes(prefix)
        (heads / f"{name}.json").write_text(json.dumps({"size": size, "file": path.name}))
    total = sum(f.stat().st_size for f in PREP.rglob("*") if f.is_file())
    say(f"{PREP} ready: {total / MIB:.1f} MiB")


# --- run (on the GPU machine) -----------------------------------------------------------


def build(log: Path) -> Path:
    """Build and install the CUDA wheel under /tmp; return the site folder."""
    site = WORK / "site"
    if (site / "llama_cpp").is_dir():
        say(f"reusing {site}")
        return site
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "src"
    shutil.rmtree(src, ignore_errors=True)
    with tarfile.open(PREP / f"{SDIST_NAME}-cuda.tar.xz") as t:
        t.extractall(src, filter="data")
    defines = {
        "GGML_CUDA": "ON",
        "CMAKE_CUDA_ARCHITECTURES": "native",
        "LLAVA_BUILD": "OFF",
        "LLAMA_BUILD_MTMD": "OFF",
        "GGML_RPC": "OFF",
        "LLAMA_BUILD_TESTS": "OFF",
        "LLAMA_BUILD_EXAMPLES": "OFF",
    }
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
    env.pop("CMAKE_ARGS", None)
    wheel_dir = WORK / "wheel"
    argv = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "--no-cache-dir",
        "--wheel-dir",
        str(wheel_dir),
        f"--config-settings=build-dir={WORK / 'build'}",
    ]
    argv += [f"--config-settings=cmake.define.{k}={v}" for k, v in defines.items()]
    argv.append(str(src / SDIST_NAME))
    say("building the CUDA wheel: " + " ".join(f"-D{k}={v}" for k, v in defines.items()))
    started = time.monotonic()
    with log.open("w") as f:
        code = subprocess.run(argv, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    say(f"build exit {code} after {(time.monotonic() - started) / 60:.1f} min")
    if code != 0:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), flush=True)
        raise SystemExit(f"the CUDA build failed (exit {code}); see {log}")
    wheel = next(wheel_dir.glob("llama_cpp_python-*.whl"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    return site


def _pythonpath(site: Path | None) -> dict[str, str]:
    paths = [str(ROOT)]
    extra = WORK / "pure"
    if (PREP / "wheels").is_dir():
        if not extra.is_dir():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--no-index",
                    "--target",
                    str(extra),
                    *map(str, sorted((PREP / "wheels").glob("*.whl"))),
                ],
                check=True,
            )
        paths.append(str(extra))
    if site is not None:
        paths.insert(0, str(site))
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])))


def _install_carried_wheel() -> Path | None:
    """Install a CUDA wheel carried in .gpucheck/cuda-wheel/ (see ``adopt``)."""
    wheels = sorted((PREP / "cuda-wheel").glob("llama_cpp_python-*.whl"))
    if not wheels:
        return None
    site = WORK / "site"
    if not (site / "llama_cpp").is_dir():
        say(f"installing the carried {wheels[-1].name}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--target",
                str(site),
                str(wheels[-1]),
            ],
            check=True,
        )
    return site


def run(out: Path, skip_build: bool, local: bool, models: list[str] | None) -> None:
    """Build (unless a wheel is carried or told not to), then run the grid in a fresh
    interpreter that has the CUDA wheel first on its path."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    site = None
    if not local:
        site = _install_carried_wheel()
        if site is None:
            site = WORK / "site" if skip_build else build(out / "build.log")
            wheel = next((WORK / "wheel").glob("llama_cpp_python-*.whl"), None)
            if wheel is not None and wheel.stat().st_size <= 16 * MIB:
                # back with the results: `adopt` it, and the next run needs no build
                shutil.copy2(wheel, out / wheel.name)
        log = out / "build.log"
        if log.is_file():  # keep only the tail: what comes back is size-limited
            log.write_text("\n".join(log.read_text(errors="replace").splitlines()[-200:]))
    env = _pythonpath(site)
    env["GGTUNE_GPU_CHECK_STARTED"] = str(time.time() - (time.monotonic() - started))
    argv = [sys.executable, str(Path(__file__)), "grid", "--out", str(out)]
    argv += ["--local"] if local else []
    argv += [a for m in models or () for a in ("--model", m)]
    code = subprocess.run(argv, env=env).returncode
    say(f"grid exit {code}; {(time.monotonic() - started) / 60:.1f} min in all")
    if code:
        raise SystemExit(code)


@dataclasses.dataclass
class Row:
    model: str
    settings: str
    device: str
    kind: str
    estimate_mib: float
    engine_mib: float


def _settings_grid(n_layer: int) -> Iterator[Any]:
    """All layers, half of them and none on the GPU; flash attention on and off, a q8_0
    cache, four slots."""
    from app.settings import Settings

    partial = max(1, (n_layer + 1) // 2)
    for ngl in (-1, partial, 0):
        for fa, cache, n_parallel in (
            ("on", "f16", 1),
            ("off", "f16", 1),
            ("on", "q8_0", 1),
            ("on", "f16", 4),
        ):
            yield Settings(
                n_ctx=8192,
                n_gpu_layers=ngl,
                flash_attn=fa,  # type: ignore[arg-type]
                cache_type_k=cache,  # type: ignore[arg-type]
                cache_type_v=cache,  # type: ignore[arg-type]
                n_parallel=n_parallel,
                use_mmap=False,
            )


def _label(s: Any) -> str:
    ngl = "all" if s.n_gpu_layers < 0 else str(s.n_gpu_layers)
    return f"ngl {ngl}, fa {s.flash_attn}, {s.cache_type_k}, np {s.n_parallel}"


def device_buffers(report: Any) -> dict[tuple[str, str], int]:
    """Return llama.cpp's bytes per (kind, device); host buffers (``CPU``, ``CUDA_Host``)
    are the host's, repacked host weights are ``repack``."""
    out: dict[tuple[str, str], int] = {}
    for group, buffers in (
        ("weights", report.model_buffers),
        ("kv", report.kv_buffers),
        ("rs", report.rs_buffers),
        ("compute", report.compute_buffers),
    ):
        for b in buffers:
            kind = group
            name = "CPU" if b.buffer.startswith(("CPU", "CUDA_Host")) else b.buffer
            if kind == "weights" and b.buffer in ("CPU_REPACK", "AMX"):
                kind = "repack"
            out[(kind, name)] = out.get((kind, name), 0) + b.bytes
    return out


def _models(wanted: list[str] | None) -> list[tuple[str, Path]]:
    """The grid's models, most telling first (a run cut short keeps those): catalog
    stand-ins (real shapes), the demo models, then the zoo's architectures."""
    from app.model.catalog import catalog_header
    from app.model.spec import model_spec
    from app.model.standin import write_standin
    from app.planning.options import quant_options
    from app.sources.standins import write_model_standin
    from tests.zoo import write_model

    WORK.mkdir(parents=True, exist_ok=True)
    models: list[tuple[str, Path]] = []
    for key in CATALOG:
        if wanted is None or key in wanted:
            # simulated Q4_K_M: quantized rows (CUDA pads them) and a mix of types
            base = model_spec(catalog_header(key))
            spec = next(
                (o.spec for o in quant_options(base, names=("Q4_K_M",)) if o.name == "Q4_K_M"),
                base,
            )
            label = f"{key} Q4_K_M" if spec is not base else key
            models.append((label, write_model_standin(spec, folder=WORK / "standins").path))
    for name in ("smollm", "gemma"):
        meta = PREP / "headers" / f"{name}.json"
        if meta.is_file() and (wanted is None or name in wanted):
            size = json.loads(meta.read_text())["size"]
            prefix = (PREP / "headers" / f"{name}.prefix").read_bytes()
            standin = write_standin(prefix, size, key=name, folder=WORK / "standins")
            models.append((name, standin.path))
    for name in ZOO_MODELS:
        if wanted is None or f"zoo-{name}" in wanted:
            models.append((f"zoo-{name}", write_model(name, WORK)))
    return models


GRID_BUDGET_S = 570
"""A model is started only while the whole run (build included) is under this."""


def grid(out: Path, local: bool, wanted: list[str] | None) -> None:
    """Run every model's settings and write the comparison (in the interpreter with the
    CUDA wheel on its path)."""
    from app.errors import EngineError, SettingsError
    from app.hardware.devices import Device, Hardware
    from app.hardware.probe import local_cpu_flags
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec
    from app.predict.estimate import estimate
    from runner.dry_run import dry_run_many

    started = float(os.environ.get("GGTUNE_GPU_CHECK_STARTED", time.time()))
    results: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()}",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "local": local,
        "devices": [],
        "rows": [],
        "errors": [],
        "skipped": [],
    }
    for label, path in _models(wanted):
        if time.time() - started > GRID_BUDGET_S:
            results["skipped"].append(label)
            continue
        spec = model_spec(read_model(path))
        settings = []
        for s in _settings_grid(spec.n_layer_all):
            try:
                estimate(spec, s, Hardware.cpu_only())
            except SettingsError:
                continue
            settings.append(s)
        say(f"{label}: {len(settings)} settings")
        t0 = time.monotonic()
        try:
            reports = dry_run_many(path, settings, mode="alloc", timeout_s=240)
        except EngineError as exc:
            results["errors"].append(f"{label}: {exc}")
            _save(out, results)
            continue
        for s, report in zip(settings, reports, strict=True):
            gpus = tuple(
                Device(d.name, "gpu", d.total_bytes, d.free_bytes)
                for d in report.devices
                if d.type == "gpu"
            )
            if not results["devices"]:
                results["devices"] = [f"{d.name} {d.description}" for d in report.devices]
            hw = Hardware(host=Device("CPU", "host", cpu_flags=local_cpu_flags()), gpus=gpus)
            est = estimate(spec, s, hw)
            engine = device_buffers(report)
            for d in est.devices:
                ours = {
                    "weights": d.weights_bytes,
                    "kv": d.kv_bytes,
                    "rs": d.recurrent_bytes,
                    "compute": d.compute_bytes,
                    "repack": d.other_bytes,
                }
                for kind, n_bytes in ours.items():
                    theirs = engine.get((kind, d.name), 0)
                    if kind != "compute" and n_bytes == theirs == 0:
                        continue
                    row = Row(label, _label(s), d.name, kind, n_bytes / MIB, theirs / MIB)
                    results["rows"].append(dataclasses.asdict(row))
        say(f"{label}: done in {time.monotonic() - t0:.0f} s")
        _save(out, results)
    _save(out, results)
    (out / "gpu_check.md").write_text(table(results))
    say(f"{len(results['rows'])} rows, {len(results['errors'])} errors")


def _save(out: Path, results: dict[str, Any]) -> None:
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(out / "gpu_check.json")


def adopt(wheel: Path) -> None:
    """Keep a CUDA wheel an earlier run brought back, for the next run to carry."""
    target = PREP / "cuda-wheel"
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.whl"):
        old.unlink()
    shutil.copy2(wheel, target / wheel.name)
    say(f"{target / wheel.name}: the next run installs it instead of building")


# --- write (here) -----------------------------------------------------------------------


def _within(est: float, eng: float) -> bool:
    return abs(est - eng) <= max(1.0, 0.03 * eng)


def table(results: dict[str, Any]) -> str:
    """Return the markdown section for docs/benchmarks.md."""
    rows = results["rows"]
    devices = ", ".join(results.get("devices") or ()) or "the devices llama.cpp listed"
    title = "### Estimate vs llama.cpp on an NVIDIA GPU"
    if results.get("local"):
        title += " (a local check of the script: no GPU, the installed wheel)"
    lines = [
        title,
        "",
        f"`python3 bench/gpu_check.py run` on {results['machine']} ({devices}), "
        f"{results['date']}: the CUDA wheel built there from the pinned sdist, each model "
        "really loaded (`alloc`, mmap off; catalog models as header stand-ins) at 8192 "
        "tokens with all, half and none of the layers on the GPU, flash attention on and "
        "off, a q8_0 cache and four slots; every buffer llama.cpp printed per device "
        "against the estimate. Per model, device and component: the worst error and the "
        "settings where it was, MiB.",
        "",
        "| model | device | component | figures | within 3 % / 1 MiB | worst error | at | "
        "llama.cpp there |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["device"], r["kind"]), []).append(r)
    for (model, device, kind), rs in groups.items():
        worst = max(rs, key=lambda r: abs(r["estimate_mib"] - r["engine_mib"]))
        ok = sum(_within(r["estimate_mib"], r["engine_mib"]) for r in rs)
        err = worst["estimate_mib"] - worst["engine_mib"]
        lines.append(
            f"| {model} | {device} | {kind} | {len(rs)} | {ok} | {err:+.2f} | "
            f"{worst['settings']} | {worst['engine_mib']:.2f} |"
        )
    ok = sum(_within(r["estimate_mib"], r["engine_mib"]) for r in rows)
    lines += ["", f"{ok} of {len(rows)} figures within 3 % or 1 MiB."]
    for e in results["errors"]:
        lines.append(f"- error: {e}")
    if results.get("skipped"):
        lines.append(f"- not reached in the time budget: {', '.join(results['skipped'])}")
    return "\n".join(lines) + "\n"


def write(results_path: Path) -> None:
    """Replace the ``gpu`` section of docs/benchmarks.md with the run's table."""
    results = json.loads(results_path.read_text())
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    start, end = "<!-- section: gpu -->", "<!-- /section: gpu -->"
    section = f"{start}\n{table(results)}{end}"
    if start in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + section + after
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(doc)
    say(f"wrote the GPU table into {doc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare")
    for name in ("run", "grid"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpucheck-out")))
        p.add_argument("--local", action="store_true", help="this machine's installed wheel")
        p.add_argument("--model", action="append", help="only these models (repeatable)")
        if name == "run":
            p.add_argument("--skip-build", action="store_true")
    w = sub.add_parser("write")
    w.add_argument("results", type=Path)
    a = sub.add_parser("adopt")
    a.add_argument("wheel", type=Path)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare()
    elif args.command == "run":
        run(args.out, args.skip_build, args.local, args.model)
    elif args.command == "grid":
        grid(args.out, args.local, args.model)
    elif args.command == "adopt":
        adopt(args.wheel)
    else:
        write(args.results)


if __name__ == "__main__":
    main()
