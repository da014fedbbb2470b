"""llama.cpp's own list of devices, read in a child process.

The names (CPU, CUDA0, ROCm0, MTL0, Vulkan0 …) and the free/total memory are what
llama.cpp's backends report (``ggml_backend_dev_*``), so they are the names and the
memory a model load will see; ``app/hardware/probe.py`` names its devices the same way.

Example::

    for dev in engine_devices():
        print(dev.name, dev.type, dev.free_bytes, dev.total_bytes)
    # CPU cpu 24537145344 25276063744
"""

from __future__ import annotations

from typing import Final

from app.errors import EngineError
from app.measured.engine_report import EngineDevice
from runner.dry_run import EngineFacts, open_engine
from runner.worker import ChildChannel, EngineWorker, ItemEvent

DEFAULT_TIMEOUT_S: Final = 60.0
"""Starting the child and initialising the backends (CUDA can take seconds)."""


def engine_facts_child(_request: None, channel: ChildChannel) -> None:
    """In the child: start llama.cpp's backends; :func:`open_engine` sends the facts."""
    channel.step("starting llama.cpp's backends")
    session = open_engine(channel)
    session.forwarder.flush()


def engine_facts(*, timeout_s: float = DEFAULT_TIMEOUT_S) -> EngineFacts:
    """Return llama.cpp's build, system info and devices, read in a child process.

    Raises an :class:`~app.errors.EngineError` subclass when the child fails or takes
    longer than ``timeout_s``.
    """
    run = EngineWorker(engine_facts_child, None, timeout_s=timeout_s).run()
    for event in run.events:
        if isinstance(event, ItemEvent) and isinstance(event.item, EngineFacts):
            return event.item
    raise EngineError("the engine child finished without sending its facts")


def engine_devices(*, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[EngineDevice, ...]:
    """Return llama.cpp's backend devices in its order (memory in bytes, as it sees it)."""
    return engine_facts(timeout_s=timeout_s).devices
