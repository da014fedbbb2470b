"""Other machines: the user's computers lent to a plan over llama.cpp's RPC backend."""
