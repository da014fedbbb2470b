"""Where models come from: the local library, Hugging Face, remote files, Ollama, the demo
models."""
