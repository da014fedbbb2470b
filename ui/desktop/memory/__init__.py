"""The Memory tab: where each byte of the plan goes, per device, and the engine check."""
