"""The CPU guard: whether llama.cpp may repack weights into its extra CPU
buffer types.

llama.cpp built with AMX support crashes with SIGILL (`tilezero`) on the
first quantized matrix product on CPUs that report AMX, as cloud VMs on
Sapphire Rapids and later do (the kernel lets the flag through, the tile
state is not enabled). The AMX kernels are only reached through the extra
buffer types, so a model loaded without them (`use_extra_bufts = False`)
runs on the plain kernels. Other repacked layouts (AVX2/AVX-512 Q4_0 x8) go
with them; the README gives what that costs.

ENGY_REPACK=1 (or `engy serve --repack`) asks for repacking anyway;
ENGY_REPACK=0 turns it off everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import llama_cpp

ENV = "ENGY_REPACK"
_AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")


def cpu_reports_amx(cpuinfo: str | None = None) -> bool:
    """Whether the CPU (as /proc/cpuinfo tells) reports AMX."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(f in flags for f in _AMX_FLAGS)
    return False


def build_has_amx(system_info: str | None = None) -> bool:
    """Whether this llama.cpp build has its AMX kernels compiled in."""
    if system_info is None:
        system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return "AMX_INT8 = 1" in system_info or "AMX = 1" in system_info


def decide(asked: bool | None, env: str | None, build_amx: bool, cpu_amx: bool) -> bool:
    """Repack or not: an explicit request wins, then the environment, then
    the guard (off only where AMX is both built in and reported)."""
    if asked is not None:
        return asked
    if env is not None and env.strip() != "":
        return env.strip().lower() not in ("0", "false", "no", "off")
    return not (build_amx and cpu_amx)


def use_repacking(asked: bool | None = None) -> bool:
    return decide(asked, os.environ.get(ENV), build_has_amx(), cpu_reports_amx())


def guard_line() -> str:
    """One line for `engy serve` and `engy doctor`."""
    build, cpu = build_has_amx(), cpu_reports_amx()
    if build and cpu:
        state = (
            "AMX built in and reported: repacking off"
            if not use_repacking()
            else ("AMX built in and reported: repacking forced on (may crash with SIGILL)")
        )
    elif build:
        state = "AMX built in, not reported by this CPU: repacking on"
    else:
        state = "no AMX in this build: repacking " + ("on" if use_repacking() else "off")
    return state
