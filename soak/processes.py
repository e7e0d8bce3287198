"""The soak's function processes: one `soak.worker` per port, respawned whenever it dies.

`Processes` starts them, watches them (a death, by the driver's SIGKILL, a handler's own
SIGKILL or anything else, is reported to `on_exit` and the process respawned at once on its
port), SIGKILLs one on demand and stops them all at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from demo.serve import free_ports
from soak.emulator import ROOT
from soak.settings import SoakSettings
from soak.worker import WorkerSettings

POLL_SECONDS = 0.05
"""How often the monitor looks for dead processes."""
STALL_SECONDS = 1.0
"""A look that comes this much later than due is a stall of the driver (`Processes.stalls`)."""


class Processes:
    """`settings.workers` function processes on free ports (`ports`)."""

    def __init__(
        self,
        settings: SoakSettings,
        workdir: Path,
        *,
        emulator_host: str,
        receiver_url: str,
        faults_file: Path,
        rng: random.Random,
        on_exit: Callable[[int, int], None],
    ) -> None:
        """Prepare the processes (nothing starts before `start`); `on_exit(port, code)` is
        called from the monitor's thread for each death (`code`: -9 for SIGKILL)."""
        self.s = settings
        self.workdir = workdir
        self.emulator_host = emulator_host
        self.receiver_url = receiver_url
        self.faults_file = faults_file
        self.rng = rng
        self.on_exit = on_exit
        self.ports = free_ports(settings.workers)
        self._workers: dict[int, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._monitor: threading.Thread | None = None
        self.stalls: list[float] = []
        """Seconds of each stall of the monitor's thread (the driver's process not run)."""

    def start(self) -> None:
        """Spawn every process and the monitor that respawns them."""
        for port in self.ports:
            self._spawn(port)
        self._monitor = threading.Thread(target=self._watch, name="monitor", daemon=True)
        self._monitor.start()

    def kill(self, port: int) -> bool:
        """SIGKILL the process on `port`; False if it was already gone."""
        with contextlib.suppress(ProcessLookupError):
            self._workers[port].send_signal(signal.SIGKILL)
            return True
        return False

    def stop(self) -> None:
        """Stop watching, then SIGKILL every process (not reported: the run is over)."""
        self._stopping = True
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join()
        for process in self._workers.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def _spawn(self, port: int) -> None:
        settings = WorkerSettings(
            port=port,
            project=self.s.project,
            receiver_url=self.receiver_url,
            faults_file=str(self.faults_file),
            lease_seconds=self.s.lease_seconds,
            max_attempts=self.s.max_attempts,
            rpc_timeout_seconds=self.s.rpc_timeout_seconds,
            function_timeout_seconds=self.s.function_timeout_seconds,
            lost_response_rate=self.s.lost_response_rate,
            refused_commit_rate=self.s.refused_commit_rate,
            read_fault_rate=self.s.read_fault_rate,
            handler_failure_rate=self.s.handler_failure_rate,
            crash_rate=self.s.crash_rate,
            seed=self.rng.randrange(2**31),
        )
        env = {
            **os.environ,
            "SOAK_WORKER": json.dumps(asdict(settings)),
            "FIRESTORE_EMULATOR_HOST": self.emulator_host,
            "GOOGLE_CLOUD_PROJECT": self.s.project,
            "PYTHONPATH": str(ROOT),
        }
        log = (self.workdir / f"worker-{port}.log").open("ab")
        self._workers[port] = subprocess.Popen(
            [sys.executable, "-m", "soak.worker"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def _watch(self) -> None:
        last = time.monotonic()
        while not self._stopping:
            now = time.monotonic()
            if now - last - POLL_SECONDS >= STALL_SECONDS:
                self.stalls.append(now - last)  # the driver itself was not run meanwhile
            last = now
            for port, process in list(self._workers.items()):
                code = process.poll()
                if code is None or self._stopping:
                    continue
                self.on_exit(port, code)
                self._spawn(port)
            time.sleep(POLL_SECONDS)
