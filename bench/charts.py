"""The charts of a run: latency per delivery kind (`plot`, results.png) and throughput
against concurrency (`plot_throughput`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import IMPL_ORDER, KIND_LABELS, THROUGHPUT_MODES, machine_line


def plot_throughput(results: dict[str, Any], path: Path) -> None:
    """Events per second against concurrency, one line per mode (log-scaled concurrency)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["throughput"]
    xs = [level["concurrency"] for level in levels]
    fig, ax = plt.subplots(figsize=(8, 5))
    for mode in THROUGHPUT_MODES:
        ys = [level["events_per_s"][mode] for level in levels]
        style = "--" if mode in ("lease_noop", "lease_spread") else "-"
        ax.plot(xs, ys, style, marker="o", label=mode)
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("concurrent requests on one instance (threads)")
    ax.set_ylabel("fresh events per second (median of rounds)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        "Throughput of one instance on the Firestore emulator\n" + machine_line(results["machine"]),
        fontsize=8,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(results: dict[str, Any], path: Path) -> None:
    """Grouped bars: median latency per delivery kind per implementation, p99 as a whisker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {(s["impl"], s["kind"]): s for s in results["latency"]}
    kinds = list(KIND_LABELS)
    impls = [i for i in IMPL_ORDER if any((i, k) in series for k in kinds)]
    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(12, 6))
    for j, impl in enumerate(impls):
        xs, medians, p99s, labels = [], [], [], []
        for x, kind in enumerate(kinds):
            s = series.get((impl, kind))
            if s is None:
                continue
            xs.append(x - 0.4 + width * (j + 0.5))
            medians.append(s["median_ms"])
            p99s.append(s["p99_ms"] - s["median_ms"])
            labels.append(f"{s['rpcs']:g}")
        bars = ax.bar(xs, medians, width, label=impl, yerr=[[0] * len(p99s), p99s], capsize=2)
        ax.bar_label(bars, labels=[f"{t} RPC" for t in labels], fontsize=7, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(kinds)), [KIND_LABELS[k] for k in kinds])
    ax.set_ylabel("latency per delivery, ms (bar: median, whisker: p99; log scale)")
    ax.set_title(
        "Price of exactly-once on the Firestore emulator; label: RPCs per delivery\n"
        + machine_line(results["machine"]),
        fontsize=9,
    )
    ax.legend(fontsize=8, ncols=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
