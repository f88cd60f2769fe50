"""The prompt cache: what a request reads from the cache, and from where.

slots.py holds the one rule (`choose`): which KV sequence a request takes,
and which source gives its cached prefix: its own sequence, a copy of
another's, the RAM cache (ram.py) or the disk tier (disk.py).
prefixes.py carries the plan out (cut, rewind to a checkpoint, copy,
restore), saves what it would overwrite, and parks idle conversations;
shift.py reads a later run at its new place. segments.py, kvstate.py,
kvfiles.py and identity.py are how a saved state is cut, written and
recognised. docs/caches-and-sessions.md states the promise per model kind,
each row with its test. Imports loading/ (and faults.py), never engine/.
"""
