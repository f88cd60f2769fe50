"""Loading a model onto this machine: the GGUF's weights where they fit
(CPU, GPUs, RPC workers; cpu.py guards against AMX), its context and KV
cache, what it takes in memory before it loads, its vocabulary and
tokenizer. Promises: a model that loads serves, one that does not fit says
why before anything is allocated. Imports nothing else of the runtime.
"""
