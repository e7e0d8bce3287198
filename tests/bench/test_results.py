"""The committed benchmark results keep their contract: every key, every figure.

`make bench` writes bench/results.json; other tools read these keys from outside, so their
spellings are part of the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import cold, cost, targets
from bench.figures import figures as derived_figures
from bench.figures import flat_figures

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"
MODES = ("baseline", "lease", "transaction", "write_only")


def test_results_hold_every_contract_key() -> None:
    """cold ratios, throughput and ratio per mode and concurrency, peak RSS at 80."""
    results = json.loads(RESULTS.read_text())
    keys = {"cold_import_ratio", "cold_first_event_ratio", "peak_rss_mb_c80"}
    for c in (1, 8, 80):
        keys |= {f"throughput_{mode}_c{c}" for mode in MODES}
        keys |= {f"throughput_ratio_{mode}_c{c}" for mode in MODES if mode != "baseline"}
    missing = keys - results.keys()
    assert not missing, f"bench/results.json lacks {sorted(missing)}: run `make bench`"
    for key in keys:
        assert isinstance(results[key], int | float), key


def test_results_hold_the_cold_start_and_client_cpu_keys() -> None:
    """Each exported function's import time, the client CPU per fresh delivery of every mode
    and its ratio to the baseline, and how long the run took."""
    results = json.loads(RESULTS.read_text())
    functions = sorted(results["cold"]["per_function_import_s"])
    assert functions == sorted(cold.exported_functions())
    keys = {f"cold_import_s_{name}" for name in functions}
    keys |= {f"cpu_us_per_delivery_{mode}" for mode in targets.CPU_MODES}
    keys |= {f"cpu_ratio_{mode}" for mode in ("lease", "lease_noop", "transaction", "write_only")}
    missing = (keys | {"duration_s"}) - results.keys()
    assert not missing, f"bench/results.json lacks {sorted(missing)}: run `make bench`"
    for key in keys:
        assert isinstance(results[key], int | float), key
        assert results[key] > 0, key
    assert results["cold"]["runs"] >= 7


def test_every_figure_is_recomputed_from_the_raw_measurements() -> None:
    """The figures at the top of results.json are what `bench.figures` derives from the raw
    measurements below them: no figure is edited by hand."""
    results = json.loads(RESULTS.read_text())
    figures = flat_figures(derived_figures(results))
    assert {k: results[k] for k in figures} == figures


def test_storage_sizes_follow_the_published_rules() -> None:
    """The storage-size page's example: users/jeff/tasks/my_task_id with four fields is 147
    bytes (44 name + 71 fields + 32)."""
    fields = {
        "type": "Personal",
        "done": False,
        "priority": 1,
        "description": "Learn Cloud Firestore",
    }
    size = cost.stored_bytes("users/jeff/tasks/my_task_id", fields, indexed=False)
    assert size["document"] == 147
