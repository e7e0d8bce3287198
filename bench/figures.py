"""Every figure of a run (`figures`): RPCs, latency ratios, storms, memory and the
production-scale ones, each with its bound, verdict and cost; `recomputed` derives them again
from a results.json."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.scale_figures import async_figures, scale_figures
from bench.targets import GUARD_KEYS, at_most, equals, figure_costs


@dataclass(frozen=True)
class Figure:
    """One reported number with its bound and verdict (`met` None: no bound, reported only).

    `role` says what the bound is: `target` (what the project promises), `guard` (a looser
    bound on a figure the host's noise moves, recorded so a regression still shows), or ""
    (reported only). `usd` says what the figure costs in dollars, where it has a price."""

    key: str
    label: str
    value: float | int | None
    target: str
    met: bool | None
    note: str = ""
    role: str = ""
    usd: str = ""


def figures(results: dict[str, Any]) -> list[Figure]:
    """Every figure of `results` with its target and verdict."""
    series = {(s["impl"], s["kind"]): s for s in results["latency"]}
    storms = results["storms"]
    memory = results["memory"]
    out: list[Figure] = []

    def add(
        key: str, label: str, value: float, target: str, check: Callable[[float], bool] | None
    ) -> None:
        out.append(Figure(key, label, value, target, None if check is None else check(value)))

    scale_figures(results, add)
    if "async_throughput" in results:
        async_figures(results, add)

    def median(impl: str, kind: str = "fresh") -> float:
        return float(series[(impl, kind)]["median_ms"])

    def rpcs(impl: str, kind: str) -> float:
        return float(series[(impl, kind)]["rpcs"])

    add(
        "fresh_rpcs",
        "RPCs, fresh event, lease mode (no-op handler)",
        rpcs("lease_noop", "fresh"),
        "<= 2",
        at_most(2),
    )
    add(
        "fresh_rpcs_write_only",
        "RPCs, fresh event, write-only mode (marker + effect)",
        rpcs("write_only", "fresh"),
        "== 1",
        lambda v: v == 1,
    )
    add(
        "duplicate_rpcs",
        "RPCs, duplicate of a sent event, lease mode, cold cache",
        rpcs("lease", "duplicate"),
        "<= 1",
        at_most(1),
    )
    add(
        "duplicate_rpcs_cached",
        "RPCs, duplicate of a sent event, lease mode, cached",
        rpcs("lease", "duplicate_cached"),
        "== 0",
        lambda v: v == 0,
    )
    add(
        "duplicate_leased_rpcs",
        "RPCs, duplicate while leased, lease mode (LeaseHeld)",
        rpcs("lease", "duplicate_leased"),
        "-",
        None,
    )
    add(
        "naive_fresh_rpcs",
        "RPCs, fresh event, naive (no-op handler)",
        rpcs("naive_noop", "fresh"),
        "-",
        None,
    )
    add(
        "fresh_latency_ratio_vs_single_write",
        "median latency, lease mode no-op handler / one single-document write",
        round(median("lease_noop") / median("baseline"), 2),
        "<= 2.5",
        at_most(2.5),
    )
    add(
        "speedup_vs_naive_fresh",
        "fresh event, median naive / median lease (no-op handlers)",
        round(median("naive_noop") / median("lease_noop"), 2),
        ">= 1.7",
        lambda v: v >= 1.7,
    )
    add(
        "speedup_vs_naive_fresh_with_effect",
        "fresh event, median naive / median lease (handler writes one document)",
        round(median("naive") / median("lease"), 2),
        "-",
        None,
    )
    for where in ("warm", "cold"):
        for name in ("lease", "transaction", "write_only", "naive"):
            found = storms.get(f"{where}_{name}")
            if found is None:
                continue
            label = f"storm {where}, {name}"
            target = name != "naive"
            add(
                f"storm_{where}_{name}_effects_per_event_max",
                f"{label}: most effects of one event ({found['events']} events x {found['copies']} "
                "copies)",
                found["effects_per_event_max"],
                "== 1" if target else "(comparison)",
                equals(1) if target else None,
            )
            if name == "lease":
                add(
                    f"storm_{where}_lease_handler_calls",
                    f"{label}: handler calls for {found['events']} events",
                    found["handler_calls"],
                    f"== {found['events']}",
                    equals(found["events"]),
                )
            add(
                f"storm_{where}_{name}_unfinished",
                f"{label}: copies never acknowledged",
                found["unfinished"],
                "== 0" if target else "(comparison)",
                equals(0) if target else None,
            )
            add(
                f"storm_{where}_{name}_store_errors",
                f"{label}: store errors (redelivered)",
                found["store_errors"],
                "-",
                None,
            )
            add(
                f"storm_{where}_{name}_rpcs_per_delivery",
                f"{label}: RPCs per delivery",
                found["rpcs_per_delivery"],
                "-",
                None,
            )
    add(
        "peak_rss_mb_10k_events",
        "peak RSS, 10,000 distinct events, lease mode (MB)",
        memory["peak_rss_mb"],
        "< 150",
        lambda v: v < 150,
    )
    if memory.get("vm_hwm_mb") is not None:
        add(
            "peak_rss_mb_10k_events_vm_hwm",
            "same, the child's own VmHWM (not inherited from the parent) (MB)",
            memory["vm_hwm_mb"],
            "< 150",
            lambda v: v < 150,
        )
    add(
        "rss_growth_mb_10k_events",
        "peak RSS growth from warm-up to 10,000 events (MB)",
        round(memory["peak_rss_mb"] - memory["peak_rss_mb_after_warmup"], 1),
        "-",
        None,
    )
    add(
        "lru_bounded",
        f"LRU size after 10,000 events (capacity {memory['cache_capacity']})",
        memory["cache_len"],
        f"<= {memory['cache_capacity']}",
        at_most(memory["cache_capacity"]),
    )
    costs = figure_costs(results)
    return [
        replace(
            f,
            role="guard" if f.key in GUARD_KEYS else ("target" if f.met is not None else ""),
            usd=costs.get(f.key, ""),
        )
        for f in out
    ]


def recomputed(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures of `results` derived again from its raw measurements with today's targets,
    guards and prices (the values are the ones results.json holds, which its tests check)."""
    return as_dicts(figures(results))


def flat_figures(figs: list[Figure]) -> dict[str, Any]:
    """`{key: value}` for results.json's top level."""
    return {f.key: f.value for f in figs}


def as_dicts(figs: list[Figure]) -> list[dict[str, Any]]:
    """Figures as JSON-ready dicts."""
    return [asdict(f) for f in figs]
