"""Find on Hugging Face: search the hub, badge each GGUF file for this hardware, download."""
