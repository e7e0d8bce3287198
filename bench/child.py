"""A measurement in an interpreter of its own, and the memory figures such a process reports:
`run_child` runs `python -m MODULE ARGS` and reads the JSON line it prints last; `peak_mb` and
`hwm_mb` are its peak RSS as `resource` and the kernel see it."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from typing import Any


def run_child(module: str, *args: int) -> dict[str, Any]:
    """Run `python -m module ARGS` (a fresh interpreter: its RSS is its own) and return the
    JSON line it printed last; raise with its stderr if it failed."""
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def peak_mb() -> float:
    """ru_maxrss of this process (KiB on Linux) in MB.

    On Linux it also includes the RSS of the process that started this one (the kernel keeps
    the high-water mark across fork and exec), so `bench.memory.measure` runs before the parent
    grows and `hwm_mb` is reported beside it.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def hwm_mb() -> float | None:
    """VmHWM: the peak RSS of this process's own address space (reset by exec), in MB."""
    try:
        with open("/proc/self/status") as status:
            lines = status.read().splitlines()
        for line in lines:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
