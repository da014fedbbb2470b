"""Everything that runs llama.cpp (llama-cpp-python), always in a child process."""
