"""The production-scale figures: cold start, client CPU per delivery, emulator-bound
throughput and an instance's peak RSS, and async handlers against sync ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.targets import (
    COLD_INSTRUCTIONS_TARGET,
    COLD_RATIO_GUARD,
    CPU_MODES,
    CPU_RATIO_TARGETS,
    ROUND_TRIPS,
    at_most,
)

Add = Callable[[str, str, float, str, Callable[[float], bool] | None], None]


def scale_figures(results: dict[str, Any], add: Add) -> None:
    """Cold start, client CPU per delivery, emulator-bound throughput, peak RSS at 80."""
    cold = results["cold"]
    add(
        "cold_import_ratio",
        f"cold start: import main.py / import the bare functions, {cold['function']} resolved "
        f"(median of {cold['runs']}, interleaved)",
        cold["cold_import_ratio"],
        f"<= {COLD_RATIO_GUARD:.2f}",
        at_most(COLD_RATIO_GUARD),
    )
    add(
        "cold_first_event_ratio",
        f"cold start: process start to first answered event, {cold['function']} / bare "
        f"(median of {cold['runs']}, interleaved)",
        cold["cold_first_event_ratio"],
        f"<= {COLD_RATIO_GUARD:.2f}",
        at_most(COLD_RATIO_GUARD),
    )
    if cold.get("cold_import_instructions_ratio") is not None:
        add(
            "cold_import_instructions_ratio",
            "cold start: instructions executed by the import, main.py / bare (callgrind; "
            "the same figure run after run)",
            cold["cold_import_instructions_ratio"],
            f"<= {COLD_INSTRUCTIONS_TARGET:.2f}",
            at_most(COLD_INSTRUCTIONS_TARGET),
        )
    for key, what in (
        ("cold_import_ratio_fastest", "import"),
        ("cold_first_event_ratio_fastest", "first event"),
    ):
        if key in cold:
            add(
                key,
                f"cold start: {what}, fastest main.py run / fastest bare run (host noise "
                "only adds time)",
                cold[key],
                "-",
                None,
            )
    if "cold_import_cpu_ratio" in cold:
        add(
            "cold_import_cpu_ratio",
            "cold start: CPU time of the import, main.py / bare (median; steadier than the "
            "wall time on a loaded machine)",
            cold["cold_import_cpu_ratio"],
            "-",
            None,
        )
    add(
        "cold_lazy_import_saving_s",
        "cold start: import time saved by loading the served function only, not all (s)",
        cold["lazy_import_saving_s"],
        "-",
        None,
    )
    for name, seconds in cold.get("per_function_import_s", {}).items():
        add(
            f"cold_import_s_{name}",
            f"cold start: import main.py with {name} resolved (s, median)",
            seconds,
            "-",
            None,
        )
    if "cpu" in results:
        _cpu_figures(results["cpu"], add)
    for level in results["throughput"]:
        c = level["concurrency"]
        rates = level["events_per_s"]
        for mode in ("baseline", "lease", "transaction", "write_only"):
            add(
                f"throughput_{mode}_c{c}",
                f"throughput, {mode}, concurrency {c} (events/s)",
                rates[mode],
                "-",
                None,
            )
        for mode in ("lease", "transaction", "write_only"):
            add(
                f"throughput_ratio_{mode}_c{c}",
                f"throughput ratio, {mode} / baseline, concurrency {c} (emulator-bound; "
                f"ceiling 1/{ROUND_TRIPS[mode]} round trips)",
                round(rates[mode] / rates["baseline"], 3),
                "-",
                None,
            )
        add(
            f"throughput_ratio_lease_noop_c{c}",
            f"throughput ratio, lease mode no-op handler / baseline, concurrency {c} "
            "(emulator-bound)",
            round(rates["lease_noop"] / rates["baseline"], 3),
            "-",
            None,
        )
        add(
            f"throughput_ratio_lease_spread_c{c}",
            f"throughput ratio, lease mode spread keys / plain keys, concurrency {c}",
            round(rates["lease_spread"] / rates["lease"], 3),
            "-",
            None,
        )
        if c == 80:
            add(
                "peak_rss_mb_c80",
                "peak RSS of one instance (main.py loaded) at concurrency 80 (MB, VmHWM)",
                level["vm_hwm_mb"],
                "< 256",
                lambda v: v < 256,
            )


def _cpu_figures(cpu: dict[str, Any], add: Add) -> None:
    """Client CPU per fresh delivery per mode, and each mode's against the baseline."""
    for mode in (m for m in CPU_MODES if m in cpu["mean_us"]):
        add(
            f"cpu_us_per_delivery_{mode}",
            f"client CPU per fresh delivery, {mode}, sequential (us, mean of {cpu['deliveries']})",
            cpu["mean_us"][mode],
            "-",
            None,
        )
    for mode, limit in CPU_RATIO_TARGETS.items():
        add(
            f"cpu_ratio_{mode}",
            f"client CPU per fresh delivery, {mode} / baseline (one plain write)",
            cpu["ratio"][mode],
            f"<= {limit}",
            at_most(limit),
        )
    if "record_writes" in cpu["ratio"]:
        add(
            "cpu_ratio_record_writes",
            "client CPU of lease mode's two record writes through the library alone / baseline",
            cpu["ratio"]["record_writes"],
            "-",
            None,
        )


def async_figures(results: dict[str, Any], add: Add) -> None:
    """Async handlers against sync ones, per mode, at concurrency 8 and 80."""
    for level in results["async_throughput"]:
        c = level["concurrency"]
        rates = level["events_per_s"]
        for mode in rates["async"]:
            add(
                f"throughput_async_{mode}_c{c}",
                f"throughput, async handler, {mode}, concurrency {c} (events/s)",
                rates["async"][mode],
                "-",
                None,
            )
            add(
                f"throughput_async_ratio_{mode}_c{c}",
                f"throughput ratio, async / sync handler, {mode}, concurrency {c}",
                round(rates["async"][mode] / rates["sync"][mode], 3),
                "-",
                None,
            )
