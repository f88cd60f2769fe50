"""The llama.cpp engine: the only package that imports llama_cpp."""
