"""llama.cpp's reserve graph rebuilt in Python, and ggml-alloc's placement of it.

See :mod:`.ggml` (tensors and ops), :mod:`.alloc` (the graph allocator), :mod:`.llm`
(llama-graph.cpp's building blocks) and :mod:`.models` (the per-architecture graphs).
"""
