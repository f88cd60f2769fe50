"""The llama.cpp context of one model, built by hand: several KV sequences
in one unified cache, flash attention where the backend has it, and the
few memory and state calls the scheduler needs.

Only the scheduler's thread uses a Context.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from ...errors import ModelLoadError, ServerError
from . import llamalog
from .model import Model

# Prompt tokens evaluated per step (llama_decode's n_batch and n_ubatch).
# Measured on gemma-3-270m, 2 threads (README, Speed): 512 and 1024 prefill
# at the same rate, 256 is slower; 512 keeps decode steps short while other
# sequences are prefilling.
BATCH = 512


_FLASH = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


_PARTIAL = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY

# Saved states go between llama.cpp and bytes objects without copies: for
# gemma-3-270m's 11.8k-token conversation (44 MB), a ctypes copy of the
# bytes took 26 ms of a 30 ms restore, and a save into a zeroed ctypes
# buffer, then bytes() of it, 45 ms (18 ms filling an unfilled bytes
# object, a memset standing in for llama.cpp). A new bytes object is filled
# once, before anything else sees it, as CPython's C API allows
# (PyBytes_FromStringAndSize with NULL: its contents not yet set).
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def _unfilled(size: int) -> bytes:
    state = _new_bytes(None, size)
    assert isinstance(state, bytes)
    return state


def _pointer(data: bytes) -> ctypes._Pointer[ctypes.c_uint8]:
    """Where `data`'s own bytes are (for llama.cpp to read or, in a state
    from _unfilled, to write)."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_uint8))


# memory.KV_TYPES by ggml's numbering (enum ggml_type).
GGML_TYPES = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
    "q8_0": 8,
    "iq4_nl": 20,
    "bf16": 30,
}


class Batch:
    """A reusable llama_batch of up to `size` tokens."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.raw = llama_cpp.llama_batch_init(size, 0, 1)
        self.n = 0
        self.outputs = 0  # tokens whose logits are asked for

    def clear(self) -> None:
        self.n = self.outputs = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Adds a token; returns its index in the batch (for sampling)."""
        i = self.n
        raw = self.raw
        raw.token[i] = token
        raw.pos[i] = pos
        raw.n_seq_id[i] = 1
        raw.seq_id[i][0] = seq
        raw.logits[i] = logits
        self.n += 1
        self.outputs += logits
        return i

    def free(self) -> None:
        llama_cpp.llama_batch_free(self.raw)


class Context:
    def __init__(self, model: Model, rollback: int = 0, outputs: int = 0) -> None:
        """`rollback`: for a model with recurrent state, how many of a
        sequence's latest tokens llama.cpp keeps a snapshot of the state
        after, so that a draft's rejected tokens can be dropped (each
        snapshot costs one more copy of every sequence's recurrent state).
        `outputs`: the most tokens of one step that ask for logits (at
        least one a sequence)."""
        self.model = model
        self.n_seq = model.parallel
        # A plain attention cache can move a run of cells to other positions
        # (shift.py): each sequence then has a scratch one to keep it in.
        # (A sliding window's cache grows with n_seq_max; a recurrent state
        # has one cell a sequence.)
        shifts = model.n_swa <= 0 and not model.recurrent and model.projector is None
        n_seq_max = self.n_seq * (2 if shifts else 1)
        # A step has BATCH tokens at most; llama.cpp wants a row a sequence.
        self.outputs = max(n_seq_max, min(BATCH, outputs))
        p = llama_cpp.llama_context_default_params()
        p.n_rs_seq = rollback if model.recurrent else 0
        # Every sequence may hold a whole window at once.
        p.n_ctx = model.n_ctx * self.n_seq
        self.n_batch = BATCH
        p.n_batch = BATCH
        p.n_ubatch = BATCH
        p.n_seq_max = n_seq_max
        # llama.cpp keeps room for this many rows of logits in its compute
        # buffer (n_vocab floats each: 300 MiB for a whole batch of a 152k
        # vocabulary), on the GPU when the output layer is there. A step
        # asks for one row a sequence, or one a drafted token: not BATCH.
        p.n_outputs_max = self.outputs
        p.n_outputs_max_per_seq = 0  # within n_outputs_max
        p.n_threads = model.threads
        p.n_threads_batch = model.threads
        p.flash_attn_type = _FLASH[model.flash_attn]
        p.type_k = GGML_TYPES[model.type_k]
        p.type_v = GGML_TYPES[model.type_v]
        # One cache for all sequences: a shared prefix can be copied from
        # one to another without copying its cells.
        p.kv_unified = True
        p.swa_full = False
        p.no_perf = True
        with llamalog.captured() as made:
            ctx = llama_cpp.llama_init_from_model(model.handle, p)
        if not ctx:
            why = "; ".join(llamalog.strip_function(line) for line in made.errors[:2])
            raise ModelLoadError(
                f"could not create a context of {p.n_ctx} tokens for {model.path.name} "
                f"with a {model.type_k}/{model.type_v} KV cache"
                + (
                    f": {why}"
                    if why
                    else " (out of memory? try a smaller --ctx-size or --parallel)"
                )
            )
        # The KV cache's size as llama.cpp allocated it (engy ps, the page).
        self.kv_bytes = llamalog.parse_kv_size(made.text)
        self.compute_bytes = llamalog.parse_compute_size(made.text)
        self.ctx: llama_cpp.llama_context_p = ctx
        self._open = True
        self.memory = llama_cpp.llama_get_memory(ctx)
        self.batch = Batch(BATCH)
        # 0 where the architecture has no such snapshots (llama.cpp says).
        self.rollback = int(llama_cpp.llama_n_rs_seq(ctx))
        self.shifts = shifts and bool(llama_cpp.llama_memory_can_shift(self.memory))

    # -- decoding -------------------------------------------------------

    def decode(self) -> bool:
        """Runs the batch; False when the KV cache has no room for it (the
        cache is left as it was, so the batch may be retried after making
        room). Any other failure inside llama.cpp is a ServerError."""
        if self.batch.n == 0:
            return True
        if self.batch.outputs > self.outputs:  # llama.cpp would abort the process
            raise ServerError(
                f"a step asked for {self.batch.outputs} rows of logits; this context "
                f"has room for {self.outputs}"
            )
        self.batch.raw.n_tokens = self.batch.n
        ret = llama_cpp.llama_decode(self.ctx, self.batch.raw)
        if ret == 1:
            return False
        if ret != 0:
            raise ServerError(f"llama_decode failed ({ret})")
        return True

    # -- memory ---------------------------------------------------------

    def clear(self, seq: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq, -1, -1)

    def cut(self, seq: int, keep: int) -> bool:
        """Keeps the first `keep` positions of `seq`; False where the cache
        cannot (recurrent state, which only a checkpoint takes back: see
        `rewind`; or a sliding window that no longer holds the tokens before
        `keep`)."""
        if self.model.recurrent and keep > 0:
            return keep == self.held(seq)
        if not self._window_covers(seq, keep):
            return False
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq, keep, -1))

    def copy(self, src: int, dst: int, keep: int, checkpoint: bytes | None = None) -> bool:
        """Makes `dst` hold the first `keep` positions of `src`. A recurrent
        state is copied whole, or (`keep` short of its end) taken from
        `checkpoint`, saved when `src` held `keep` tokens; so is a sliding
        window that no longer reaches back to `keep`."""
        if self.model.recurrent:
            return self._copy_recurrent(src, dst, keep, checkpoint)
        window: bytes | None = None
        if not self._window_covers(src, keep):
            if checkpoint is None:
                return False
            window = checkpoint
        self.clear(dst)
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, 0, keep)
        if self.model.n_swa > 0:
            # seq_cp shares cells, and llama.cpp never reuses a sliding-window
            # cell that two sequences hold, even once both have moved past
            # it: a few copies of one prefix filled the window layers' cache
            # for good (issue 22). Reading the window back in gives `dst`
            # window cells of its own (a few MB); full-attention cells stay
            # shared. (Reading a state clears the sequence's cells of those
            # layers first.)
            if window is None:
                window = self.save(dst, partial=True)
            if not self._read(dst, window, _PARTIAL) or self.pos_max(dst) != keep - 1:
                self.clear(dst)
                return False
        return True

    def _copy_recurrent(self, src: int, dst: int, keep: int, checkpoint: bytes | None) -> bool:
        whole = keep == self.held(src)
        if not whole and checkpoint is None:
            return False
        self.clear(dst)
        # Attention cells are shared up to `keep`; the recurrent state is
        # shared whole (llama.cpp copies it when either sequence moves on),
        # then replaced by the checkpoint's where `keep` is short of the end.
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, 0, keep)
        if not whole:
            assert checkpoint is not None
            if not self._read(dst, checkpoint, _PARTIAL):
                self.clear(dst)
                return False
        if self.held(dst) != keep:
            self.clear(dst)
            return False
        return True

    def drop_after(self, seq: int, keep: int) -> bool:
        """Removes the positions from `keep` on: a draft the model did not
        take (the newest positions only: what is before them is intact). A
        recurrent state goes back to llama.cpp's snapshot after `keep`,
        which it holds for the `rollback` latest tokens of the last step.
        False, and the sequence cleared, where that could not be done."""
        if llama_cpp.llama_memory_seq_rm(self.memory, seq, keep, -1):
            return True
        self.clear(seq)
        return False

    def stash(self, src: int, p0: int, p1: int, owner: int) -> bool:
        """Keeps positions [p0, p1) of `src` aside in `owner`'s scratch
        sequence, in cells of their own: moving them later must not move
        `src`'s (seq_cp shares cells; a state read back gets new ones)."""
        scratch = self.n_seq + owner
        self.clear(scratch)
        llama_cpp.llama_memory_seq_cp(self.memory, src, scratch, p0, p1)
        state = self.save(scratch)
        self.clear(scratch)
        if not self._read(scratch, state, 0) or self.held(scratch) != p1:
            self.clear(scratch)
            return False
        return True

    def unstash(self, seq: int, delta: int) -> None:
        """Moves what `seq`'s scratch sequence holds by `delta` positions
        and into `seq` (llama.cpp rotates the keys at the next decode)."""
        scratch = self.n_seq + seq
        llama_cpp.llama_memory_seq_add(self.memory, scratch, -1, -1, delta)
        llama_cpp.llama_memory_seq_cp(self.memory, scratch, seq, -1, -1)
        self.clear(scratch)

    def drop_stash(self, owner: int) -> None:
        if self.shifts:
            self.clear(self.n_seq + owner)

    def held(self, seq: int) -> int:
        """Positions the KV cache holds for `seq` (0 when empty)."""
        return self.pos_max(seq) + 1

    def _window_covers(self, seq: int, keep: int) -> bool:
        """Sliding-window layers keep only the latest positions: evaluation
        can resume at `keep` only if the window before it is still there
        (the token at `keep` sees the n_swa - 1 positions before it)."""
        n_swa = self.model.n_swa
        if n_swa <= 0 or keep <= 0:
            return True
        return self.pos_min(seq) <= max(0, keep - n_swa + 1)

    def pos_max(self, seq: int) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq))

    def pos_min(self, seq: int) -> int:
        return int(llama_cpp.llama_memory_seq_pos_min(self.memory, seq))

    # -- saved states ---------------------------------------------------

    def state_size(self, seq: int) -> int:
        """Bytes `save(seq)` would return, without copying them."""
        return int(llama_cpp.llama_state_seq_get_size_ext(self.ctx, seq, 0))

    def save(self, seq: int, partial: bool = False) -> bytes:
        """The sequence's state; `partial`: only its sliding-window layers
        or its recurrent state (a checkpoint, to resume from this position
        later)."""
        flags = _PARTIAL if partial else 0
        size = llama_cpp.llama_state_seq_get_size_ext(self.ctx, seq, flags)
        state = _unfilled(size)  # llama.cpp writes the state straight into it
        n = llama_cpp.llama_state_seq_get_data_ext(self.ctx, _pointer(state), size, seq, flags)
        return state if n == size else state[:n]

    def rewind(self, seq: int, pos: int, checkpoint: bytes) -> bool:
        """Back to `pos`, where `checkpoint` was saved: the full-attention
        layers are cut there, and the window layers (or the recurrent
        state) put back as they were."""
        if self.model.recurrent:
            # The state first: llama.cpp refuses to cut a recurrent state
            # short of its end, and once it is the checkpoint's, the cut
            # leaves it as it is and cuts the attention layers only.
            ok = self._read(seq, checkpoint, _PARTIAL)
            ok = ok and bool(llama_cpp.llama_memory_seq_rm(self.memory, seq, pos, -1))
        else:
            llama_cpp.llama_memory_seq_rm(self.memory, seq, pos, -1)
            ok = self._read(seq, checkpoint, _PARTIAL)
        if not ok or self.pos_max(seq) != pos - 1:
            self.clear(seq)
            return False
        return True

    def restore(self, seq: int, state: bytes) -> bool:
        self.clear(seq)
        if not self._read(seq, state, 0):
            self.clear(seq)
            return False
        return True

    def _read(self, seq: int, state: bytes, flags: int) -> bool:
        """Puts a saved state into `seq` (the layers `flags` say); False
        where llama.cpp refused it (no room, another layout)."""
        src = _pointer(state)
        return bool(llama_cpp.llama_state_seq_set_data_ext(self.ctx, src, len(state), seq, flags))

    def close(self) -> None:
        if self._open:
            self._open = False
            self.batch.free()
            llama_cpp.llama_free(self.ctx)
