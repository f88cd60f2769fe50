"""The llama.cpp engine: the only package that imports llama_cpp.

Its parts, each importing only those above it in this list:
- faults.py: faults a test raises in the engine's phases (nothing else arms them);
- loading/: a model onto this machine (weights, context, devices, memory, vocabulary);
- cache/: the prompt cache: which sequence a request takes and where its cached
  prefix comes from (cache/slots.py is the rule), its tiers (RAM, disk) and
  their file format;
- engine/: the thread that owns a model and its step loop (batching, sampling,
  drafts);
- pool.py: which models are loaded, one engine each: what the server calls.
"""
