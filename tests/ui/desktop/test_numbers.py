"""Issue 18, "wrong or misleading numbers": no number on screen that a user would read
wrongly — no speed for a plan that cannot run, users counted at the cache types set, the
same layer count everywhere, sizes that say what they count.

The numbers expected come from the core for the same model, settings and hardware.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QAbstractItemView, QDoubleSpinBox, QSpinBox, QWidget
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware, planned_hardware
from app.model.catalog import CATALOG_DIR, catalog_header, load_entry
from app.model.facts import gpu_layers_text, kv_bytes_per_token, offloaded_text
from app.model.quant import simulate_quant
from app.model.spec import model_spec
from app.planning.options import quant_options
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.units import format_bytes
from tests.ui.desktop.test_compare import wait_for_rows
from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, make_window
from ui.desktop.compare.chart import NO_SPEED, speed_words
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.speed import speed_text, users_capacity, users_goal

GIB = 1024**3
MIB = 1024**2
TINY = Hardware.cpu_only(200 * MIB, cpu_flags=("avx", "avx2", "f16c", "fma"))


def _qwen3_8b_q4_k_m() -> object:
    spec = model_spec(catalog_header(load_entry(CATALOG_DIR / "qwen3-8b.json")))
    return simulate_quant(spec, "Q4_K_M").spec


@pytest.fixture
def tiny_window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    window = make_window(qtbot, qsettings)
    window.hardware.set_hardware(TINY, "Tiny: 200 MiB RAM", "profile")
    return window


def test_no_speed_is_shown_for_settings_that_do_not_fit(
    qtbot: QtBot, tiny_window: MainWindow
) -> None:
    state = tiny_window.estimates.state
    assert state.verdict is not None
    assert state.verdict.level == "does_not_fit"
    speed = tiny_window.memory_panel.speed
    qtbot.waitUntil(lambda: speed.summary.no_speed is not None, timeout=10_000)
    line = tiny_window.memory_panel.speed_label.text()
    assert line.startswith("No speed: these settings do not fit")
    assert "tok/s writing" not in line
    assert speed.summary.prediction is None
    assert speed_text(speed.summary) == line


def test_compare_shows_no_speed_for_a_quant_that_does_not_fit(
    qtbot: QtBot, tiny_window: MainWindow
) -> None:
    tiny_window.estimates.update(n_ctx=4096, n_parallel=1, kv_unified=False)
    tiny_window.tabs.setCurrentWidget(tiny_window.compare_panel)
    wait_for_rows(qtbot, tiny_window)
    model = tiny_window.compare_panel.table_model
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    writing, reading = headers.index("Writing tok/s"), headers.index("Reading tok/s")
    rows = model.rows
    assert any(r.fits is False for r in rows), "the tiny machine holds none of the big quants"
    for i, row in enumerate(rows):
        if row.fits is False:
            assert model.index(i, writing).data() == "—"
            assert model.index(i, reading).data() == "—"
            assert model.index(i, writing).data(Qt.ItemDataRole.UserRole) is None
            assert "does not fit" in model.index(i, writing).data(Qt.ItemDataRole.ToolTipRole)
            assert speed_words(row) == NO_SPEED
        else:
            assert model.index(i, writing).data() != "—"


def test_users_are_counted_at_the_cache_types_set() -> None:
    """K q8_0 + V f16 holds fewer users than q8_0 for both: the line must not plan the
    second when the first is set."""
    spec = _qwen3_8b_q4_k_m()
    hardware = planned_hardware(Hardware.cpu_only(32 * GIB), gpu_bytes=[12 * GIB])
    (own,) = quant_options(spec, simulate=None, file_bytes=spec.weights_bytes)  # type: ignore[arg-type]

    def users(k: str, v: str) -> tuple[int, tuple[str, str]]:
        settings = Settings(
            n_ctx=4 * 16384, n_parallel=4, cache_type_k=k, cache_type_v=v, flash_attn="on"
        )
        goal = users_goal(settings, GIB)
        assert goal.kv_types == (k,)
        capacity = users_capacity(own, hardware, settings, GIB, SpeedFactors())
        assert capacity.plan is not None
        placed = capacity.plan.settings
        return capacity.n_users, (placed.cache_type_k, placed.cache_type_v)

    mixed, mixed_types = users("q8_0", "f16")
    both, both_types = users("q8_0", "q8_0")
    assert mixed_types == ("q8_0", "f16")
    assert both_types == ("q8_0", "q8_0")
    assert mixed < both


def _card_facts(window: MainWindow) -> dict[str, str]:
    """Return the model card on screen, label to value."""
    form = window.models_panel.card_form
    facts: dict[str, str] = {}
    for row in range(form.rowCount()):
        label = form.itemAt(row, form.ItemRole.LabelRole)
        field = form.itemAt(row, form.ItemRole.FieldRole)
        if label is not None and field is not None:
            facts[label.widget().text().rstrip(":")] = field.widget().text()  # type: ignore[attr-defined]
    return facts


GEMMA_27B = "catalog:gemma-3-27b"


@pytest.fixture
def gemma_window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    window = make_window(qtbot, qsettings, open_demo=False)
    window.hardware.set_hardware(
        planned_hardware(Hardware.cpu_only(64 * GIB), gpu_bytes=[24 * GIB]), "24 GiB", "plan"
    )
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(GEMMA_27B)
    return window


def test_kv_per_token_counts_only_the_layers_that_grow(gemma_window: MainWindow) -> None:
    """Gemma 3 27B: 10 of 62 layers grow with the context; 496 KiB per token over all 62
    implied 7.75 GiB at 16k, the real cache is about 1.9 GiB."""
    spec = gemma_window.estimates.spec
    assert spec is not None
    kv = _card_facts(gemma_window)["KV per token"]
    growing = kv_bytes_per_token(spec, "f16", sliding=False)
    every = kv_bytes_per_token(spec, "f16")
    assert growing < every / 4
    assert kv.startswith(f"f16 {growing / 1024:,.1f} KiB, ")
    assert "in the 10 full-attention layers (these grow with the context)" in kv
    assert f"{every / 1024:,.1f} KiB" not in kv
    assert "52 sliding-window layers hold only the last 1,024 tokens" in kv


def test_the_weights_line_follows_the_quant_chosen(qtbot: QtBot, gemma_window: MainWindow) -> None:
    before = _card_facts(gemma_window)["Weights"]
    gemma_window.estimates.set_quant("Q4_K_M")
    spec = gemma_window.estimates.spec
    assert spec is not None
    after = _card_facts(gemma_window)["Weights"]
    assert after != before
    assert "as Q4_K_M (simulated" in after
    assert format_bytes(spec.weights_bytes) in after
    gemma_window.estimates.set_quant(None)
    assert _card_facts(gemma_window)["Weights"] == before


def test_layers_are_counted_alike_on_the_card_the_slider_and_the_verdict(
    qtbot: QtBot, gemma_window: MainWindow
) -> None:
    """-ngl counts the output layer too: the slider runs to n_layer + 1, its label says the
    card's n_layer repeating layers + output, as the verdict counts them."""
    panel = gemma_window.settings_panel
    spec = gemma_window.estimates.spec
    assert spec is not None
    n = spec.n_layer
    assert _card_facts(gemma_window)["Layers"].startswith(f"{n}: ")
    assert f"-ngl counts {n + 1}" in _card_facts(gemma_window)["Layers"]
    assert panel.gpu_layers.maximum() == n + 1
    gemma_window.estimates.update(n_gpu_layers=48)
    assert panel.gpu_layers_label.text() == f"47 of {n} layers + output"
    verdict = gemma_window.estimates.state.verdict
    assert verdict is not None
    assert verdict.spilled_layers == n - 47  # the verdict's "Spills 15 of 62 layers"


def test_no_gpu_layers_slider_on_a_machine_without_a_gpu(
    qtbot: QtBot, tiny_window: MainWindow
) -> None:
    panel = tiny_window.settings_panel
    spec = tiny_window.estimates.spec
    assert spec is not None
    assert not panel.gpu_layers.isEnabled()
    assert panel.gpu_layers_label.text() == f"no GPU: all {spec.n_layer} layers on the CPU"


def test_gpu_layers_text_matches_llama_cpp() -> None:
    """src/llama-model.cpp: i_gpu_start = n_layer + 1 - ngl, the output layer is n_layer."""
    assert gpu_layers_text(63, 62) == "all 62 layers + output"
    assert gpu_layers_text(-1, 62) == "all 62 layers + output"
    assert gpu_layers_text(48, 62) == "47 of 62 layers + output"
    assert gpu_layers_text(1, 62) == "the output layer only"
    assert gpu_layers_text(0, 62) == "none (all 62 layers on the CPU)"


def test_verifys_offloaded_count_says_the_sliders_words() -> None:
    """llama.cpp logs "offloaded N/M layers to GPU" with N = min(ngl, n_layer + 1) and M =
    n_layer + 1 (src/llama-model.cpp, load_tensors): Verify says it in the words the
    GPU-layers slider uses for the same -ngl, and a CPU-only build as the slider does."""
    n_layer = 18
    for ngl in range(n_layer + 3):
        logged = (min(ngl, n_layer + 1), n_layer + 1)
        assert offloaded_text(logged, n_layer) == "GPU layers: " + gpu_layers_text(ngl, n_layer)
    assert offloaded_text((0, 19), 18) == "GPU layers: none (all 18 layers on the CPU)"
    assert offloaded_text(None, 18) == "no GPU: all 18 layers on the CPU"
    # an RPC-capable build on a machine without a GPU logs "offloaded 19/19" (the -ngl
    # asked for) and places nothing: said as the slider says it there
    assert offloaded_text((19, 19), 18, has_gpu=False) == "no GPU: all 18 layers on the CPU"


BARE_NUMBER = re.compile(r"^[~≈+−-]?\d[\d,.]*$")
UNIT_IN_HEADER = re.compile(r"tok/s|GiB|MiB|bits?/weight|KLD|%|tokens|layers|GB/s|T(FL)?OPS", re.I)
COUNTS = {"Use"}  # check boxes, not numbers


def test_every_number_on_every_screen_says_its_unit(qtbot: QtBot, qsettings: QSettings) -> None:
    """Each number box has a unit (its suffix, or words in place of the number); each bare
    number in a table has its unit in the column's header."""
    window = make_window(qtbot, qsettings)
    bare: list[str] = []
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        if window.tabs.currentWidget() is window.compare_panel:
            wait_for_rows(qtbot, window)
        qtbot.wait(50)
        for spin in window.findChildren(QSpinBox) + window.findChildren(QDoubleSpinBox):
            if spin.isVisible() and not spin.suffix().strip():
                bare.append(f"{window.tabs.tabText(i)}: a box showing {spin.text()!r}")
        for view in window.findChildren(QAbstractItemView):
            model = view.model()
            if not view.isVisible() or model is None:
                continue
            for c in range(model.columnCount()):
                header = str(model.headerData(c, Qt.Orientation.Horizontal) or "")
                if UNIT_IN_HEADER.search(header) or header in COUNTS:
                    continue
                for r in range(min(model.rowCount(), 40)):
                    value = model.index(r, c).data()
                    if isinstance(value, int | float) or (
                        isinstance(value, str) and BARE_NUMBER.match(value.strip())
                    ):
                        bare.append(f"{window.tabs.tabText(i)}: {header!r} shows {value!r}")
                        break
    assert bare == []


def test_no_screen_points_a_user_to_the_projects_own_files(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    """Issue 18: tooltips cited a section of the founders' notes; Compare's line said
    "published ratios (docs/sources.md §5)". A user of the app has neither: no text or
    tooltip names them."""
    window = make_window(qtbot, qsettings)
    cited: list[str] = []
    pattern = re.compile(r"docs/|REFERENCE\.md|DESIGN\.md|\.md\b")
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        if window.tabs.currentWidget() is window.compare_panel:
            wait_for_rows(qtbot, window)
        qtbot.wait(300)  # the speed line and its tooltip follow the slider-rest delays
        for widget in window.findChildren(QWidget):
            if not widget.isVisible():
                continue
            text = widget.text() if hasattr(widget, "text") and callable(widget.text) else ""
            for words in (str(text), widget.toolTip()):
                if pattern.search(words):
                    cited.append(f"{window.tabs.tabText(i)}: {words[:120]!r}")
    assert cited == []


def test_planned_gpus_take_a_bandwidth_and_say_when_it_is_assumed(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    """'Plan for GPUs: 24 GiB' assumed 300 GB/s without a word (Qwen3-8B at a third of an
    RTX 4090's speed): the line says so, and a bandwidth given is the one used."""
    window = make_window(qtbot, qsettings, open_demo=False)
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path("catalog:qwen3-8b")
    panel = window.settings_panel
    panel.planned.click()
    panel.gpu_gib.setValue(24)
    speed = window.memory_panel.speed
    gpus = window.hardware.choice.hardware.gpus
    assert [g.bandwidth_gb_per_s for g in gpus] == [None]
    qtbot.waitUntil(lambda: speed.summary.prediction is not None, timeout=10_000)
    qtbot.waitUntil(
        lambda: "300 GB/s assumed" in window.memory_panel.speed_label.text(), timeout=10_000
    )
    slow = speed.summary.prediction.decode_tok_per_s  # type: ignore[union-attr]
    panel.gpu_bandwidth.setValue(1008)
    gpus = window.hardware.choice.hardware.gpus
    assert [g.bandwidth_gb_per_s for g in gpus] == [1008]
    qtbot.waitUntil(lambda: "assumed" not in window.memory_panel.speed_label.text(), timeout=10_000)
    fast = speed.summary.prediction.decode_tok_per_s  # type: ignore[union-attr]
    assert fast > 2 * slow
