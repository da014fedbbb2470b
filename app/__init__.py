"""ggtune's core: pure, typed Python (no Qt, no llama_cpp).

Data flows one way: GGUF bytes -> :func:`app.gguf_reader.read_header` -> :class:`app.spec.ModelSpec`
-> :func:`app.estimate.estimate` (with :class:`app.settings.Settings` and
:class:`app.hardware.Hardware`) -> :class:`app.estimate.MemoryEstimate`.
"""
