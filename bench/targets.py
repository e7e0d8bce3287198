"""The bounds of `make bench`'s figures, which are targets and which guards, and what the
production-scale figures cost in dollars (`figure_costs`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CPU_RATIO_TARGETS = {"lease_noop": 2.35, "lease": 4.4, "transaction": 4.8, "write_only": 2.1}
"""Client CPU per fresh delivery against the baseline's single write: the targets (the round
trips are 2, 3, 3 and 1, and the library's marshalling of each dominates). `lease_noop`'s
2.35 asks that dedup's own work per delivery be half what it was at 2.70; the library's two
record writes alone (`record_writes`, no target) show how much of it is dedup's to cut. At
Cloud Run's vCPU price these bounds are cents per million events, against dollars of
Firestore operations (`figure_costs`)."""

CPU_MODES = ("baseline", "lease", "lease_noop", "transaction", "write_only", "record_writes")

COLD_INSTRUCTIONS_TARGET = 1.05
"""The cold-start target: instructions the import of main.py executes against the bare
functions' (callgrind's count, which the host cannot move)."""

COLD_RATIO_GUARD = 1.10
"""The guard on the cold start's wall time, import and first event alike, main.py against the
bare functions: recorded with a looser bound, since the host moves them by several percent."""

GUARD_KEYS = ("cold_import_ratio", "cold_first_event_ratio")
"""The figures whose bound is a guard, not a target."""

DEFAULT_VCPU_SECOND_USD = 0.000024
"""Cloud Run's vCPU-second (`bench.cost.VCPU_SECOND_USD`), for results that do not record it."""

ROUND_TRIPS = {"lease": 3, "lease_noop": 2, "transaction": 3, "write_only": 1}
"""Round trips of a fresh event with its effect (the baseline makes 1): the emulator-bound
throughput ratio's ceiling is 1 / this on a machine whose emulator is the bottleneck."""


SCALE_TARGET_KEYS = (
    "cold_import_instructions_ratio",
    "cold_import_ratio",
    "cold_first_event_ratio",
    *(f"cpu_ratio_{mode}" for mode in CPU_RATIO_TARGETS),
    "peak_rss_mb_c80",
)
"""The production-scale targets and guards the README states: cold start, client CPU, memory
(what an instance pays, and what carries over from the emulator to production)."""


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def equals(expected: float) -> Callable[[float], bool]:
    return lambda v: v == expected


def _dollars(usd: float) -> str:
    """Dollars, with the digits a small amount needs."""
    digits = 2 if usd >= 1 else 3 if usd >= 0.01 else 4
    return f"${max(usd, 0):.{digits}f}"


def _added(usd: float, what: str, unit: str) -> str:
    """What a figure adds, in dollars per million `unit`; $0 when it adds nothing."""
    if usd <= 0:
        return "$0: no slower than the bare functions"
    return f"{_dollars(usd)} per million {unit} of added {what}"


def figure_costs(results: dict[str, Any]) -> dict[str, str]:
    """What the cold-start, client CPU and memory figures cost in dollars, key -> text: vCPU
    time at Cloud Run's price (`bench.cost`), per million events or cold starts."""
    vcpu = float(
        (results.get("cost") or {}).get("prices", {}).get("vcpu_second", DEFAULT_VCPU_SECOND_USD)
    )
    costs: dict[str, str] = {}
    cpu = results.get("cpu")
    if cpu is not None:
        base = cpu["mean_us"]["baseline"]
        for mode in (m for m in CPU_MODES if m in cpu["mean_us"]):
            costs[f"cpu_us_per_delivery_{mode}"] = (
                f"{_dollars(cpu['mean_us'][mode] * vcpu)} per million events of instance CPU"
            )
        for mode, limit in CPU_RATIO_TARGETS.items():
            added = (cpu["mean_us"][mode] - base) * vcpu
            costs[f"cpu_ratio_{mode}"] = (
                f"{_dollars(added)} per million events of added instance CPU "
                f"({_dollars((limit - 1) * base * vcpu)} at the bound)"
            )
    cold = results.get("cold") or {}
    imports, firsts = cold.get("import_s") or {}, cold.get("first_event_s") or {}
    if "bare" in imports and "main" in imports:
        extra = (imports["main"] - imports["bare"]) * 1e6 * vcpu
        costs["cold_import_ratio"] = _added(extra, "vCPU time", "cold starts")
        ratio = cold.get("cold_import_instructions_ratio")
        if ratio is not None:
            extra = (ratio - 1) * imports["bare"] * 1e6 * vcpu
            costs["cold_import_instructions_ratio"] = "about " + _added(
                extra, "vCPU time", "cold starts"
            )
    if "bare" in firsts and "main" in firsts:
        extra = (firsts["main"] - firsts["bare"]) * 1e6 * vcpu
        costs["cold_first_event_ratio"] = _added(extra, "vCPU time", "cold starts")
    costs["peak_rss_mb_c80"] = "$0: an instance is billed for its configured memory, not its RSS"
    return costs
