"""'N GPUs + RAM' is built one way for the CLI, the desktop and a profile composition."""

from __future__ import annotations

import argparse

from app.hardware.devices import Hardware, planned_gpu, planned_hardware, planned_host
from app.hardware.probe import local_hardware
from app.hardware.profiles import compose
from app.units import GIB
from ui.cli.options import hardware_from_args


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**({"profile": None, "gpu_mem": None, "ram": None} | given))


def test_cli_gpus_and_ram_are_the_planned_machine() -> None:
    # The CLI once gave a planned device free = capacity, the desktop free = unknown.
    here = local_hardware()
    cli = hardware_from_args(_args(gpu_mem=[24.0, 12.0], ram=64.0))
    assert cli == planned_hardware(here, gpu_bytes=[24 * GIB, 12 * GIB], ram_bytes=64 * GIB)
    assert cli.gpus == (planned_gpu(0, 24 * GIB), planned_gpu(1, 12 * GIB))
    assert cli.host == planned_host(64 * GIB, here.host.cpu_flags)
    assert all(d.free_bytes is None for d in cli.devices)
    assert [d.capacity_bytes for d in cli.devices] == [24 * GIB, 12 * GIB, 64 * GIB]


def test_what_is_not_planned_stays_this_machines() -> None:
    here = local_hardware()
    only_ram = hardware_from_args(_args(ram=8.0))
    assert (only_ram.gpus, only_ram.host.capacity_bytes) == (here.gpus, 8 * GIB)
    only_gpus = hardware_from_args(_args(gpu_mem=[16.0]))
    assert only_gpus.host.capacity_bytes == here.host.capacity_bytes
    assert only_gpus.gpus == (planned_gpu(0, 16 * GIB),)


def test_a_bare_size_in_a_composition_is_the_same_ram() -> None:
    assert compose("64 GB").host == planned_host(64 * GIB)
    assert Hardware.with_gpus([24 * GIB], 64 * GIB) == planned_hardware(
        Hardware.cpu_only(), gpu_bytes=[24 * GIB], ram_bytes=64 * GIB
    )
