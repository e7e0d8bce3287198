"""Every knob of a soak run, one frozen dataclass (`python -m soak --help` lists them)."""

from __future__ import annotations

from dataclasses import dataclass

from soak.drain import DRAIN_CAP_SECONDS, DRAIN_SECONDS
from soak.emulator import ROOT


@dataclass(frozen=True)
class SoakSettings:
    """Every knob of a soak run (`python -m soak --help` lists them)."""

    seconds: float = 600.0
    workers: int = 4
    copies: int = 3
    inflight_events: int = 30
    senders: int = 48
    kill_interval: float = 8.0
    crash_rate: float = 0.01
    restart_interval: float = 60.0
    lost_response_rate: float = 0.03
    refused_commit_rate: float = 0.01
    read_fault_rate: float = 0.01
    handler_failure_rate: float = 0.03
    receiver_fault_interval: float = 2.0
    collision_rate: float = 0.03
    lease_seconds: int = 15
    max_attempts: int = 10
    rpc_timeout_seconds: int = 5
    function_timeout_seconds: int = 10
    """The timeout the soak's functions declare (`DedupConfig.function_timeout_seconds`, their
    time budget): the longest the lease covers, `lease_seconds` - `rpc_timeout_seconds`. The
    results report the longest delivery beside it (`longest_delivery_s`)."""
    drain_seconds: float = DRAIN_SECONDS
    """The drain ends this long after the later of its start and the last process death,
    unless every copy is acknowledged first (`soak.drain`)."""
    drain_cap_seconds: float = DRAIN_CAP_SECONDS
    """The drain ends this long after its start in any case (`soak.drain`)."""
    seed: int = 1
    project: str = "demo-soak"
    workdir: str = str(ROOT / ".cache" / "soak")
