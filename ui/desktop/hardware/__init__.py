"""The Hardware tab: this machine, the profiles, and custom hardware."""
