"""The Explain tab: what each part of the footprint is, layer by layer."""
