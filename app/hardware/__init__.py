"""What a model runs on: devices, hardware profiles, and the probe of this machine."""
