"""What the real engine reported and measured, the benchmark history, and the fit to it."""
