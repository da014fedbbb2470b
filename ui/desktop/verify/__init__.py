"""The Verify tab: llama.cpp's dry run and benchmark beside the estimate, and their history."""
