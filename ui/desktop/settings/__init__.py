"""The Settings panel: the run settings the estimate uses (context, quant, offload, runner)."""
