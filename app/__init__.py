"""ggtune's core: pure, typed Python (no Qt, no llama_cpp).

Data flows one way: GGUF bytes -> :func:`app.model.gguf_reader.read_header` ->
:class:`app.model.spec.ModelSpec` -> :func:`app.predict.estimate.estimate` (with
:class:`app.settings.Settings` and :class:`app.hardware.devices.Hardware`) ->
:class:`app.predict.estimate.MemoryEstimate`.

The packages, lowest first (an import-linter ``layers`` contract in pyproject.toml holds
the order: a package imports only those below it):

- :mod:`app.errors`, :mod:`app.units`, :mod:`app.paths`, :mod:`app.state_files`,
  :mod:`app.settings`: the typed errors; sizes, how sizes and speeds read, the margin and
  the speed depth; where data files are; reading the small files ggtune and the runners
  keep without trusting them; the run settings in llama.cpp's terms.
- :mod:`app.model` and :mod:`app.hardware` (independent of each other): what a model is
  (GGUF header, spec, catalog, quant levels, quality) and what it runs on (devices,
  profiles, the probes of this machine).
- :mod:`app.predict`: memory estimate, speed model, verdict.
- :mod:`app.export`: settings in each runner's format.
- :mod:`app.sources`: what a model name means and reading it; where models come from
  (library, Hugging Face, remote files, Ollama's API, the demo models).
- :mod:`app.measured`: what the real engine reported and measured, and the fit to it.
- :mod:`app.planning`: quant options, goals, the planner's search and words, Compare rows,
  Explain, and each runner's own fitting.
"""
