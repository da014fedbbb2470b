"""What a model is: the GGUF header, the spec llama.cpp sees, the catalog, quant levels, quality."""
