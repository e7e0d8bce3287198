"""The report of a run: the machine it ran on, the rich tables and the Markdown of the
README's Performance section (`markdown`, `targets_markdown`)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.figures import recomputed
from bench.targets import CPU_MODES, CPU_RATIO_TARGETS, DEFAULT_VCPU_SECOND_USD, SCALE_TARGET_KEYS

IMPL_ORDER = ("baseline", "naive", "naive_noop", "lease", "lease_noop", "transaction", "write_only")
KIND_LABELS = {
    "fresh": "fresh event",
    "duplicate": "duplicate of a sent event",
    "duplicate_cached": "duplicate, cached",
    "duplicate_leased": "duplicate while leased",
}


def machine() -> dict[str, Any]:
    """What the benchmark ran on: CPUs, memory, CPU model, OS and Python."""
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    model = ""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        found = re.search(r"^Model name:\s*(.+)$", lscpu, re.MULTILINE)
        model = found.group(1).strip() if found else ""
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "mem_total_gb": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": model or platform.processor(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "firestore": "emulator at " + os.environ.get("FIRESTORE_EMULATOR_HOST", "?"),
    }


def machine_line(m: dict[str, Any]) -> str:
    """One-line description of the machine."""
    return (
        f"{m['nproc']} CPUs ({m['cpu_model']}), {m['mem_total_gb']} GB RAM, {m['os']}, "
        f"Python {m['python']}, Firestore {m['firestore']}"
    )


def async_markdown(results: dict[str, Any]) -> list[str]:
    """Events per second of async and sync handlers per mode and concurrency."""
    levels = results.get("async_throughput", [])
    if not levels:
        return []
    header = "| mode | " + " | ".join(
        f"c{lv['concurrency']} sync events/s | c{lv['concurrency']} async events/s (ratio)"
        for lv in levels
    )
    lines = [header + " |", "|---|" + "---:|---:|" * len(levels)]
    for mode in levels[0]["events_per_s"]["async"]:
        cells = []
        for level in levels:
            sync, aio = level["events_per_s"]["sync"][mode], level["events_per_s"]["async"][mode]
            cells.append(f"{sync:.0f} | {aio:.0f} ({aio / sync:.2f})")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def targets_markdown(results: dict[str, Any]) -> str:
    """The README's table: each production-scale target or guard, the figure, the verdict and
    what the figure costs in dollars."""
    by_key = {f["key"]: f for f in recomputed(results)}
    lines = [
        "| figure | key | value | bound | verdict | what it costs |",
        "|---|---|---:|---|---|---|",
    ]
    for key in SCALE_TARGET_KEYS:
        f = by_key.get(key)
        if f is not None:
            value = round(f["value"], 3) if isinstance(f["value"], float) else f["value"]
            verdict = _verdict(f["met"])
            lines.append(
                f"| {f['label']} | `{key}` | {value} | {f['role']} {f['target']} | {verdict} | "
                f"{f['usd'] or '-'} |"
            )
    return "\n".join(lines) + "\n"


def bounds_lines(results: dict[str, Any]) -> list[str]:
    """One line per target and guard: its key, value, bound and whether it is met."""
    lines = []
    for f in recomputed(results):
        if f["role"]:
            usd = f" ({f['usd']})" if f["usd"] else ""
            lines.append(
                f"{f['role']:<6} {f['key']}: {f['value']:g} {f['target']}: "
                f"{_verdict(f['met'])}{usd}"
            )
    return lines


def _verdict(met: bool | None) -> str:
    return "-" if met is None else ("met" if met else "MISSED")


def print_tables(results: dict[str, Any], console: Console | None = None) -> None:
    """The latency/RPC table and the figures table with verdicts."""
    console = console or Console()
    lat = Table(title="Per delivery: Firestore RPCs (counted) and latency (ms)")
    for column in ("implementation", "kind", "n", "RPCs", "by method", "median", "p99"):
        lat.add_column(column, justify="left" if column in ("implementation", "kind") else "right")
    for s in sorted(results["latency"], key=_series_order):
        methods = _methods(s)
        lat.add_row(
            s["impl"],
            s["kind"],
            str(s["deliveries"]),
            f"{s['rpcs']:g}",
            methods,
            f"{s['median_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
        )
    console.print(lat)
    figs = Table(title="Figures, targets and guards")
    for column in ("figure", "value", "bound", "verdict", "what it costs"):
        figs.add_column(column)
    for f in recomputed(results):
        verdict = _verdict(f["met"])
        style = "red" if f["met"] is False else ("green" if f["met"] else "")
        figs.add_row(
            f["label"] + f" [dim]({f['key']})[/dim]",
            f"{f['value']:g}",
            f"{f['role']} {f['target']}".strip(),
            f"[{style}]{verdict}[/{style}]" if style else verdict,
            f["usd"] or "-",
        )
    console.print(figs)
    sections = (
        cpu_markdown,
        throughput_markdown,
        async_markdown,
        cold_markdown,
        storm_markdown,
        cost_markdown,
    )
    for section in sections:
        console.print("\n".join(section(results)), markup=False, highlight=False)
        console.print()
    console.print("Targets and guards:", markup=False, highlight=False)
    for line in bounds_lines(results):
        console.print("  " + line, markup=False, highlight=False)
    console.print(
        f"Machine: {machine_line(results['machine'])}; run took {results['duration_s']:.0f} s"
    )


def _methods(s: dict[str, Any]) -> str:
    short = {"BatchGetDocuments": "BatchGet", "BeginTransaction": "Begin"}
    return ", ".join(f"{short.get(m, m)} {c:g}" for m, c in s["rpcs_by_method"].items()) or "-"


def _series_order(s: dict[str, Any]) -> tuple[int, int]:
    return IMPL_ORDER.index(s["impl"]), list(KIND_LABELS).index(s["kind"])


def markdown(results: dict[str, Any]) -> str:
    """The figures and the latency table as Markdown (for the README's Performance section)."""
    lines = [
        f"Machine: {machine_line(results['machine'])}.",
        "",
        "| figure | key | value | bound | verdict | what it costs |",
        "|---|---|---:|---|---|---|",
    ]
    for f in recomputed(results):
        lines.append(
            f"| {f['label']} | `{f['key']}` | {f['value']:g} | {f['role']} {f['target']}".rstrip()
            + f" | {_verdict(f['met'])} | {f['usd'] or '-'} |"
        )
    lines += ["", *cpu_markdown(results), "", *throughput_markdown(results)]
    if "async_throughput" in results:
        lines += ["", *async_markdown(results)]
    lines += ["", *cold_markdown(results)]
    lines += ["", *storm_markdown(results), "", *cost_markdown(results)]
    lines += [
        "",
        "| implementation | kind | RPCs | by method | median ms | p99 ms |",
        "|---|---|---:|---|---:|---:|",
    ]
    for s in sorted(results["latency"], key=_series_order):
        methods = _methods(s)
        lines.append(
            f"| {s['impl']} | {s['kind']} | {s['rpcs']:g} | {methods} | "
            f"{s['median_ms']:.2f} | {s['p99_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


THROUGHPUT_MODES = ("baseline", "lease", "transaction", "write_only", "lease_noop", "lease_spread")


def throughput_markdown(results: dict[str, Any]) -> list[str]:
    """Events per second (and ratio to the baseline) per mode and concurrency."""
    levels = results["throughput"]
    header = "| mode | " + " | ".join(f"c{lv['concurrency']} events/s (ratio)" for lv in levels)
    lines = [header + " |", "|---|" + "---:|" * len(levels)]
    for mode in THROUGHPUT_MODES:
        cells = []
        for level in levels:
            rates = level["events_per_s"]
            cells.append(f"{rates[mode]:.0f} ({rates[mode] / rates['baseline']:.2f})")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return lines


def cold_markdown(results: dict[str, Any]) -> list[str]:
    """Cold-start medians, in seconds."""
    cold = results["cold"]
    imports, firsts = cold["import_s"], cold["first_event_s"]
    return [
        f"| cold start (median of {cold['runs']}) | bare | main.py | ratio |",
        "|---|---:|---:|---:|",
        f"| import (s) | {imports['bare']:.3f} | {imports['main']:.3f} | "
        f"{cold['cold_import_ratio']:.3f} |",
        f"| import, every function of main.py resolved (s) | - | "
        f"{imports['main_every_function']:.3f} | - |",
        f"| process start to first answered event, {cold['function']} (s) | "
        f"{firsts['bare']:.3f} | {firsts['main']:.3f} | {cold['cold_first_event_ratio']:.3f} |",
        *(
            f"| import, {name} resolved (s) | - | {seconds:.3f} | - |"
            for name, seconds in cold.get("per_function_import_s", {}).items()
        ),
    ]


def cpu_markdown(results: dict[str, Any]) -> list[str]:
    """Client CPU per fresh delivery per mode, and its ratio to the baseline."""
    cpu = results.get("cpu")
    if cpu is None:
        return []
    lines = [
        f"| client CPU per fresh delivery ({cpu['deliveries']} per mode, sequential) | "
        "mean us | median us | ratio to baseline (mean) | target | instance CPU $ per million "
        "events |",
        "|---|---:|---:|---:|---|---:|",
    ]
    vcpu = float(
        (results.get("cost") or {}).get("prices", {}).get("vcpu_second", DEFAULT_VCPU_SECOND_USD)
    )
    for mode in (m for m in CPU_MODES if m in cpu["mean_us"]):
        limit = CPU_RATIO_TARGETS.get(mode)
        lines.append(
            f"| {mode} | {cpu['mean_us'][mode]:.0f} | {cpu['median_us'][mode]:.0f} | "
            f"{cpu['ratio'][mode]:.2f} | {'-' if limit is None else f'<= {limit}'} | "
            f"{cpu['mean_us'][mode] * vcpu:.4f} |"
        )
    return lines


def storm_markdown(results: dict[str, Any]) -> list[str]:
    """One row per storm: runs, errors, RPCs."""
    lines = [
        "| storm | handler calls | effects per event (max) | unfinished | store errors | "
        "other errors | deliveries | RPCs per delivery | RPCs per copy | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, st in results["storms"].items():
        other = sum(st["errors_by_kind"].values()) - st["store_errors"]
        lines.append(
            f"| {name} | {st['handler_calls']} | {st['effects_per_event_max']} | "
            f"{st['unfinished']} | {st['store_errors']} | {other} | {st['deliveries']} | "
            f"{st['rpcs_per_delivery']:g} | {st['rpcs_per_copy']:g} | {st['wall_s']:.1f} |"
        )
    return lines


def cost_markdown(results: dict[str, Any]) -> list[str]:
    """Dollars per million events, dedup's share, per implementation."""
    prices = results["cost"]["prices"]
    lines = [
        f"| $ per million events ({prices['location']}, records kept "
        f"{prices['retention_days']}+{prices['ttl_lag_days']} days) | reads | writes | "
        "deletes | bytes stored | operations $ | storage $ | fresh event $ | "
        "instance CPU $ (fresh) | duplicate $ (cold cache) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["cost"]["per_million"]:
        kept = " (never deleted)" if row["kept_forever"] else ""
        lines.append(
            f"| {row['impl']}{kept} | {row['reads']:g} | {row['writes']:g} | {row['deletes']} | "
            f"{row['bytes_per_event']} | {row['operations_usd']:.2f} | "
            f"{row['storage_usd']:.3f} | {row['fresh_usd']:.2f} | {_cpu_usd_cell(row)} | "
            f"{row['duplicate_usd']:.2f} |"
        )
    sizes, enterprise = results.get("record_write_bytes"), results["cost"].get("enterprise_lease")
    if sizes is not None and enterprise is not None:
        write = enterprise["prices_per_million_units"]["write"]
        lines += [
            "",
            f"Firestore Enterprise edition (us-central1, ${write} per million write units of "
            f"1 KiB): a fresh lease-mode event writes its claim ({sizes['claim']} bytes as "
            f"Firestore counts the document, {sizes['write_units']['claim']} unit) and its "
            f"outcome ({sizes['outcome']} bytes, {sizes['write_units']['outcome']} unit), and "
            f"its TTL delete takes {sizes['write_units']['outcome']}: "
            f"{enterprise['write_units']} write units, ${enterprise['usd']:.2f} per million "
            "events (`record_write_bytes`; no index entries: Enterprise creates none by itself).",
        ]
    return lines


def _cpu_usd_cell(row: dict[str, Any]) -> str:
    """The instance CPU dollars of a cost row, "-" where the run did not measure them."""
    value = row.get("instance_cpu_usd")
    return "-" if value is None else f"{value:.3f}"
