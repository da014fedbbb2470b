"""What a model will do on some hardware: memory per device, speed, and the verdict."""
