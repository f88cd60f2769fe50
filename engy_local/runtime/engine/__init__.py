"""The engine: one thread per loaded model (worker.py) runs its scheduler
(scheduler.py): continuous batching of every admitted request, one
llama_decode a step, each request sampled from its own chain (sampling.py),
drafts where they pay (speculate.py, widen.py). No failing phase ends the
thread or leaves a request unanswered (faults.py). local.py turns a job's
events into the async stream the server reads. Imports cache/ and loading/.
"""
