"""How long do the Quantization dropdown's badges take? (issue 18, Finding a model)

The desktop works them out on the job pool when the list opens
(ui/desktop/hub/quant_badges.py): one :func:`app.planning.compare.option_row` per level
(llama-server's own fitting, the estimate, the speed prediction) over the file and every
level :func:`app.model.quant.simulate_all` can make (34 or so), then the badge. For catalog
models (their simulated levels made once, outside the timing) on a few machines, with the
context pinned at 16k (the user moved the slider) and left to llama-server (its fit lowers
the context until the model fits, a search per level): CPU time of this thread, the first
run with the compute model's caches emptied ("cold") and the median of 3 after it.

Run: ``.venv/bin/python -m bench.bench_badges``. Prints a markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import platform
import statistics
import time

from app.hardware.devices import Hardware
from app.model.catalog import catalog_header
from app.model.spec import model_spec
from app.planning.badges import quant_badges
from app.planning.compare import RunnerChoice
from app.planning.options import QuantOption, own_quant_name
from app.predict import estimate as estimate_module
from app.predict.graph import compute
from app.predict.speed import SpeedFactors
from app.settings import Settings
from ui.desktop.shared.estimate_controller import simulate_choices

GIB = 1024**3
N_CTX = 16384
CASES = [
    ("qwen3-8b", (12,), 32),
    ("gemma-3-27b", (24,), 64),
    ("gemma-3-27b", (4,), 8),
    ("llama-3.1-70b", (24,), 64),
]


def clear() -> None:
    estimate_module._COMPUTE_MEMO.clear()
    compute.clear_caches()


def main() -> None:
    print(
        f"machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        "| model, GPUs + RAM (GiB) | context | levels | cold ms | warm ms (median of 3) "
        "| fit on GPU | too large |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, gpus, ram in CASES:
        spec = model_spec(catalog_header(name))
        choices, specs = simulate_choices(spec)
        options = [QuantOption(own_quant_name(spec), spec, spec.weights_bytes, True)] + [
            QuantOption(c.name, specs[c.name], c.weights_bytes, False) for c in choices
        ]
        hw = Hardware.with_gpus([g * GIB for g in gpus], ram_bytes=ram * GIB)
        for pinned in (True, False):
            settings = Settings(n_ctx=N_CTX)
            runner = RunnerChoice("llama-server", (("n_ctx", N_CTX),) if pinned else ())
            times: list[float] = []
            for _ in range(4):
                if not times:
                    clear()
                start = time.thread_time()
                badges = quant_badges(options, settings, hw, SpeedFactors(), runner)
                times.append((time.thread_time() - start) * 1000)
            kinds = [b.kind for b in badges.values()]
            machine = " + ".join(f"{g}" for g in gpus) + f" + {ram}"
            context = f"{N_CTX // 1024}k pinned" if pinned else "llama-server's fit"
            print(
                f"| {name}, {machine} | {context} | {len(options)} | {times[0]:,.0f} | "
                f"{statistics.median(times[1:]):,.0f} | {kinds.count('gpu')} | "
                f"{kinds.count('too_large')} |"
            )


if __name__ == "__main__":
    main()
