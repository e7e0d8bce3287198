"""The committed benchmark results hold the async handlers' figures."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"


def test_results_hold_the_async_throughput_keys() -> None:
    """Events per second of async handlers, and their ratio to sync ones, for every mode at
    concurrency 8 and 80 (`make bench BENCH_ARGS="--only async"` measures them alone)."""
    results = json.loads(RESULTS.read_text())
    keys = {
        f"throughput_async{kind}_{mode}_c{c}"
        for kind in ("", "_ratio")
        for mode in ("lease", "transaction", "write_only")
        for c in (8, 80)
    }
    missing = keys - results.keys()
    assert not missing, f"bench/results.json lacks {sorted(missing)}: run `make bench`"
    for key in keys:
        assert isinstance(results[key], int | float), key
        assert results[key] > 0, key
