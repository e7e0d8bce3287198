"""`python -m bench`: run every measurement, print the tables, write results.json and .png.

Needs FIRESTORE_EMULATOR_HOST (`make bench` starts the emulator and sets it). The defaults
finish in about 8 minutes on 2 CPUs; `make bench BENCH_ARGS="..."` sizes a longer run. Options:
`--deliveries N` (timed deliveries per implementation and kind, default 300),
`--cpu-deliveries N` (fresh deliveries per mode for the client CPU, default 400),
`--memory-events N` (default 10000), `--storms a,b` (default naive,lease,transaction,
write_only), `--naive-storm-seconds S` and `--naive-storm-copies N` (the naive pattern's
storms: how long a copy keeps being redelivered, default 20, and copies per event, default
10; the other storms send 50),
`--throughput-events N` (fresh events per round and concurrency, default 400),
`--cold-runs N` (default 15), `--markdown` (print results.json as Markdown and exit),
`--only async` (measure async against sync handlers only, `--throughput-events` per round,
and merge the figures into the existing results.json), `--only steps` (the RPCs of durable
steps, `steps_rpcs`, merged likewise), `--only sizes` (the claim's and the outcome's size as
Firestore counts a document, `record_write_bytes`, and Enterprise's price of a lease-mode
event, merged likewise), `--only imports` (each exported function's import time,
`per_function_import_s`, all in one sitting, merged likewise: for a function added to main.py
since the last full run). A longer run, about 25 minutes:
`--deliveries 1000 --cpu-deliveries 2000 --cold-runs 31 --naive-storm-seconds 150
--naive-storm-copies 50` (the naive storms as the others).
Exit status: 0 whether or not targets are met; 1 if the benchmark itself broke; 2 on misuse.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import (
    asyncio_throughput,
    charts,
    cold,
    cost,
    cpu,
    figures,
    memory,
    record_size,
    report,
    steps,
    throughput,
)
from bench.impls import SUFFIX
from bench.measure import Matrix
from bench.rpc_count import RpcCounter, counting_client
from bench.storm import (
    DEFAULT_NAIVE_BOUNDS,
    EXPECTED_ERRORS,
    NAIVE_COPIES,
    NAIVE_GIVE_UP_SECONDS,
    NaiveBounds,
    cold_storm,
    warm_storm,
)
from dedup import dedup_key

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results.json"
RESULTS_PNG = HERE / "results.png"
THROUGHPUT_PNG = HERE / "throughput.png"
STORMS = ("naive", "lease", "transaction", "write_only")
"""Storms run by default (`--storms` picks some)."""


def run(
    deliveries: int,
    memory_events: int,
    storms_to_run: list[str],
    throughput_events: int,
    cold_runs: int,
    console: Console,
    cpu_deliveries: int = 400,
    naive: NaiveBounds = DEFAULT_NAIVE_BOUNDS,
) -> dict[str, Any]:
    """Every measurement; returns the results document."""
    started = time.perf_counter()
    counter = RpcCounter()
    client = counting_client(counter)

    def phase(name: str) -> None:
        console.print(f"[dim]{time.perf_counter() - started:6.1f} s[/dim]  {name}")

    # First, while this process is small: a child's ru_maxrss starts at its parent's RSS.
    phase(f"memory: {memory_events} events in a separate process")
    mem = memory.measure(memory_events)
    phase("cold start: imports and first events, bare and main.py")
    cold_start = cold.measure(client, cold_runs)
    phase(f"client CPU: {cpu_deliveries} fresh deliveries per mode, one at a time")
    client_cpu = cpu.measure(cpu_deliveries)
    phase(f"throughput: {throughput_events} fresh events per round at concurrency 1, 8, 80")
    rates = throughput.measure(throughput_events)
    phase(f"async handlers: {throughput_events} fresh events per round at concurrency 8, 80")
    async_rates = asyncio_throughput.measure(throughput_events)
    phase(f"latency and RPCs: {deliveries} deliveries per implementation and kind")
    matrix = Matrix(client, counter, deliveries)
    latency = matrix.run(lambda k: phase(f"  {k}"))
    sizes = cost.record_sizes(client, _one_event_documents(matrix))
    phase("durable steps: RPCs of each kind, and of a five-step replay")
    step_rpcs = steps.measure()
    phase("record writes: the claim's and the outcome's size, as Firestore counts a document")
    record_bytes = record_size.measure(client)

    storms: dict[str, Any] = {}
    for name in storms_to_run:
        phase(f"storm: {name}, warm (the shared emulator)")
        storms[f"warm_{name}"] = warm_storm(name, naive)
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as workdir:
        for name in storms_to_run:
            phase(f"storm: {name}, cold (a Firestore emulator started right before)")
            storms[f"cold_{name}"] = cold_storm(name, Path(workdir) / name, naive)

    results: dict[str, Any] = {
        "machine": report.machine(),
        "deliveries_per_series": deliveries,
        "cold": cold_start,
        "cpu": client_cpu,
        "throughput": rates,
        "async_throughput": async_rates,
        "latency": latency,
        "storms": storms,
        "memory": mem,
        "cost": {
            "prices": cost.prices(),
            "per_million": cost.per_million(latency, sizes, cpu_us=client_cpu["mean_us"]),
            "enterprise_lease": cost.enterprise_lease(record_bytes),
        },
        "steps_rpcs": step_rpcs,
        "record_write_bytes": record_bytes,
        "duration_s": round(time.perf_counter() - started, 1),
    }
    figs = figures.figures(results)
    return {**figures.flat_figures(figs), **results, "figure_list": figures.as_dicts(figs)}


def _one_event_documents(matrix: Matrix) -> dict[str, list[str]]:
    """The documents each implementation keeps for its first fresh event of the run."""
    paths = {}
    for impl in ("lease", "transaction", "write_only"):
        [event_id] = matrix.event_ids(impl, "fresh", 1)
        paths[impl] = [f"triggerEvents/{dedup_key(event_id, SUFFIX)}"]
    [event_id] = matrix.event_ids("naive", "fresh", 1)
    paths["naive"] = [f"triggerEvents/{event_id}-{SUFFIX}", f"sentEmails/{event_id}-{SUFFIX}"]
    return paths


def only_one(section: str, throughput_events: int, console: Console) -> dict[str, Any]:
    """Measure one section (`async`: async against sync handlers; `steps`: the RPCs of durable
    steps; `sizes`: the record writes' sizes; `imports`: each exported function's import time)
    and merge it into the committed results: the other sections are kept as they are, every
    figure is computed again from them."""
    previous = json.loads(RESULTS_JSON.read_text())
    old_keys = {f["key"] for f in previous["figure_list"]} | {"figure_list"}
    sections = {k: v for k, v in previous.items() if k not in old_keys}
    if section == "imports":
        console.print("cold start: each exported function's import time")
        sections["cold"] = {
            **sections["cold"],
            "per_function_import_s": cold.per_function_imports(),
        }
    elif section == "sizes":
        console.print("record writes: the claim's and the outcome's size, Enterprise's cost")
        client = counting_client(RpcCounter())
        sections["record_write_bytes"] = record_size.measure(client)
        sections["cost"] = {
            **sections["cost"],
            "enterprise_lease": cost.enterprise_lease(sections["record_write_bytes"]),
        }
    elif section == "steps":
        console.print("durable steps: RPCs of each kind, and of a five-step replay")
        sections["steps_rpcs"] = steps.measure()
    else:
        console.print(f"async handlers: {throughput_events} fresh events per round, c8 and c80")
        sections["async_throughput"] = asyncio_throughput.measure(throughput_events)
    figs = figures.figures(sections)
    return {**figures.flat_figures(figs), **sections, "figure_list": figures.as_dicts(figs)}


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--cpu-deliveries", type=int, default=400)
    parser.add_argument("--naive-storm-seconds", type=float, default=NAIVE_GIVE_UP_SECONDS)
    parser.add_argument("--naive-storm-copies", type=int, default=NAIVE_COPIES)
    parser.add_argument("--memory-events", type=int, default=10_000)
    parser.add_argument("--storms", default=",".join(STORMS))
    parser.add_argument("--throughput-events", type=int, default=400)
    parser.add_argument("--cold-runs", type=int, default=15)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", choices=["async", "steps", "imports", "sizes"], default=None)
    args = parser.parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=130)
    if args.markdown:
        print(report.markdown(json.loads(RESULTS_JSON.read_text())), end="")
        return 0
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        console.print(
            "[red]error:[/red] FIRESTORE_EMULATOR_HOST is not set; run `make bench`, which "
            "starts the Firestore emulator, or export it for an emulator you started"
        )
        return 2
    if args.deliveries < 100:
        parser.error("--deliveries must be at least 100 (p99 needs them)")
    if min(args.cpu_deliveries, args.cold_runs, args.naive_storm_copies) < 1 or (
        args.naive_storm_seconds <= 0
    ):
        parser.error("--cpu-deliveries, --cold-runs and the naive storm's bounds must be positive")
    storms_to_run = [s for s in args.storms.split(",") if s]
    if "lease" not in storms_to_run or not set(storms_to_run) <= set(EXPECTED_ERRORS):
        parser.error(f"--storms must include lease, from {sorted(EXPECTED_ERRORS)}")
    # One log line per delivery would drown the table: keep the records, drop the output.
    logging.getLogger("dedup").addHandler(logging.NullHandler())
    logging.getLogger("dedup").propagate = False
    if args.only is not None:
        results = only_one(args.only, args.throughput_events, console)
    else:
        results = run(
            args.deliveries,
            args.memory_events,
            storms_to_run,
            args.throughput_events,
            args.cold_runs,
            console,
            cpu_deliveries=args.cpu_deliveries,
            naive=NaiveBounds(args.naive_storm_seconds, args.naive_storm_copies),
        )
    RESULTS_JSON.write_text(json.dumps(results, indent=2) + "\n")
    charts.plot(results, RESULTS_PNG)
    charts.plot_throughput(results, THROUGHPUT_PNG)
    report.print_tables(results, console)
    written = (RESULTS_JSON, RESULTS_PNG, THROUGHPUT_PNG)
    console.print(
        "Wrote " + ", ".join(str(p.relative_to(Path.cwd(), walk_up=True)) for p in written)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
