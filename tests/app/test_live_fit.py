"""A slider tick's fit (``RunnerOptions(live=True)``, ``llama_fit(quick=True)``) and the
planner's guided searches: fewer reserved graphs, the same answers where it matters.

The live fit searches on the stage model's compute buffers, then on the reserve graph's
buffers of where it ended, until it ends where it was calibrated; the plan's estimate is
the graph's either way. The planner's searches (:func:`app.planning.planner._last_true`)
start from a guess and must return exactly what a bisection on the graph returns.
"""

from __future__ import annotations

import threading

import pytest

from app.hardware.devices import Hardware
from app.model.catalog import catalog_header, catalog_keys
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.planning.planner import _last_true
from app.planning.runner_plan import RunnerOptions, plan_runner
from app.predict import estimate as estimate_module
from app.predict.estimate import estimate
from app.predict.graph import compute
from app.settings import ALL_LAYERS, Settings
from tests.app.test_llama_fit import catalog_spec
from tests.zoo import ZOO

GIB = 1024**3


@pytest.mark.parametrize(
    ("name", "quant", "gpus", "n_ctx"),
    [
        ("llama-3.1-8b", "Q4_K_M", (6,), 16384),
        ("llama-3.1-70b", "Q4_K_M", (24,), 8192),
        ("llama-3.1-70b", "Q4_K_M", (24, 24), 32768),
        ("gemma-3-27b", "Q8_0", (12, 8), 16384),
        ("qwen3-30b-a3b", "Q4_K_M", (12,), 32768),
    ],
)
def test_a_live_plan_decides_as_the_plan_on_the_graph(
    name: str, quant: str, gpus: tuple[int, ...], n_ctx: int
) -> None:
    spec = catalog_spec(name, quant)
    hw = Hardware.with_gpus([g * GIB for g in gpus], ram_bytes=64 * GIB)
    exact = plan_runner(spec, "llama-server", hw, given={"n_ctx": n_ctx})
    live = plan_runner(
        spec, "llama-server", hw, given={"n_ctx": n_ctx}, options=RunnerOptions(live=True)
    )
    assert live.settings == exact.settings
    assert live.estimate == exact.estimate  # the graph's buffers, not the stage model's
    assert live.estimate.compute_known


def test_a_live_plan_reserves_fewer_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = catalog_spec("llama-3.1-70b")
    hw = Hardware.with_gpus([24 * GIB], ram_bytes=64 * GIB)
    seen: list[int] = []
    real = compute._reserve

    def counting(*args: object, **kwargs: object) -> object:
        seen.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compute, "_reserve", counting)
    counts = []
    for options in (RunnerOptions(), RunnerOptions(live=True)):
        compute.clear_caches()
        estimate_module._COMPUTE_MEMO.clear()
        seen.clear()
        plan_runner(spec, "llama-server", hw, given={"n_ctx": 24576}, options=options)
        counts.append(len(seen))
    assert counts[1] < counts[0], counts


@pytest.mark.parametrize("edge", [0, 1, 7, 31, 32, 63, 64])
@pytest.mark.parametrize("guess_off", [-20, -3, -1, 0, 1, 2, 9, 40])
def test_a_guided_search_returns_what_a_bisection_returns(edge: int, guess_off: int) -> None:
    # true up to edge (inclusive), false above; the guess is the edge moved by guess_off
    asked: list[int] = []

    def fits(n: int, quick: bool) -> bool:
        if quick:
            return n <= edge + guess_off
        asked.append(n)
        return n <= edge

    assert _last_true(fits, 0, 64) == edge
    assert 0 not in asked  # lo is taken to hold, never tested
    if guess_off == 0:
        assert len(asked) <= 2


def test_the_quick_compute_runs_for_every_zoo_and_catalog_model(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # a slider tick's fit guesses with the stage model on every architecture the graph
    # covers: it must run on each (gemma4 keeps a block-0 tensor outside blk.N)
    folder = tmp_path_factory.mktemp("quick")
    specs = []
    for name, build in ZOO.items():
        path = folder / f"{name}.gguf"
        build(path)
        specs.append(model_spec(read_model(path)))
    specs += [model_spec(catalog_header(key)) for key in catalog_keys()]
    hw = Hardware.with_gpus([1 * GIB, 1 * GIB], ram_bytes=64 * GIB)
    for spec in specs:
        for ngl in (0, 3, ALL_LAYERS):
            s = Settings(n_ctx=4096, n_gpu_layers=ngl)
            quick = estimate(spec, s, hw, quick_compute=True)
            assert not quick.compute_known, spec.arch
            assert all(d.compute_bytes >= 0 for d in quick.devices)
            assert sum(d.compute_bytes for d in quick.devices) > 0, spec.arch


def test_estimates_on_several_threads_are_the_serial_ones() -> None:
    # the desktop estimates on the GUI thread and on its job pool at once (Compare): the
    # compute model's caches (lines, planned reservations, the memo) are shared by both
    spec = catalog_spec("llama-3.1-8b")
    hw = Hardware.with_gpus([24 * GIB], ram_bytes=64 * GIB)
    contexts = [4096 + 2048 * k for k in range(16)]
    layers = (ALL_LAYERS, 20)

    def run(order: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, ...]]:
        out = {}
        for n_ctx, ngl in order:
            est = estimate(spec, Settings(n_ctx=n_ctx, n_gpu_layers=ngl), hw)
            out[(n_ctx, ngl)] = tuple(d.compute_bytes for d in est.devices)
        return out

    cases = [(c, n) for c in contexts for n in layers]
    serial = {}
    for case in cases:
        compute.clear_caches()
        estimate_module._COMPUTE_MEMO.clear()
        serial.update(run([case]))
    compute.clear_caches()
    estimate_module._COMPUTE_MEMO.clear()
    results: list[dict[tuple[int, int], tuple[int, ...]]] = []
    orders = [cases, cases[::-1], cases[1::2] + cases[::2], cases[::3] + cases[1::3] + cases[2::3]]
    threads = [threading.Thread(target=lambda o=o: results.append(run(o))) for o in orders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == len(orders)
    for got in results:
        assert got == serial
