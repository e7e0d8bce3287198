"""The report's targets and guards: their keys, bounds and verdicts, printed with their cost.

Derived from the committed bench/results.json (no benchmark runs here): the verdicts are
computed again from its raw measurements with today's bounds.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from bench import report
from bench.figures import recomputed
from bench.targets import SCALE_TARGET_KEYS, figure_costs

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"
BOUNDS = {
    "cpu_ratio_lease_noop": ("target", "<= 2.35"),
    "cpu_ratio_lease": ("target", "<= 4.4"),
    "cpu_ratio_transaction": ("target", "<= 4.8"),
    "cpu_ratio_write_only": ("target", "<= 2.1"),
    "cold_import_instructions_ratio": ("target", "<= 1.05"),
    "cold_import_ratio": ("guard", "<= 1.10"),
    "cold_first_event_ratio": ("guard", "<= 1.10"),
}
"""The production-scale bounds, by the result key they apply to."""


def results() -> dict:
    return json.loads(RESULTS.read_text())


def test_each_bound_applies_to_its_key_with_its_role() -> None:
    figures = {f["key"]: f for f in recomputed(results())}
    for key, (role, bound) in BOUNDS.items():
        assert key in results(), key  # a key of bench/results.json
        assert (figures[key]["role"], figures[key]["target"]) == (role, bound), key
        limit = float(bound.split()[1])
        assert figures[key]["met"] is (figures[key]["value"] <= limit), key
        assert figures[key]["usd"].startswith(("$", "about $")), key
    assert set(BOUNDS) <= set(SCALE_TARGET_KEYS)


def test_a_missed_bound_is_reported_missed() -> None:
    raw = results()
    raw["cold"] = {**raw["cold"], "cold_import_ratio": 1.2, "cold_import_instructions_ratio": 1.06}
    figures = {f["key"]: f for f in recomputed(raw)}
    assert figures["cold_import_ratio"]["met"] is False
    assert figures["cold_import_instructions_ratio"]["met"] is False
    assert "| guard <= 1.10 | MISSED |" in report.targets_markdown(raw)


def test_the_report_prints_every_target_and_guard_and_its_verdict() -> None:
    out = io.StringIO()
    report.print_tables(results(), Console(file=out, width=200))
    printed = out.getvalue()
    figures = {f["key"]: f for f in recomputed(results())}
    for key, (role, bound) in BOUNDS.items():
        verdict = "met" if figures[key]["met"] else "MISSED"
        line = f"{role:<6} {key}: {figures[key]['value']:g} {bound}: {verdict}"
        assert line in printed, line


def test_the_cost_of_the_client_cpu_follows_the_price() -> None:
    """The added instance CPU of a mode, priced per vCPU-second, per million events."""
    raw = results()
    mean = raw["cpu"]["mean_us"]
    price = raw["cost"]["prices"]["vcpu_second"]
    added = (mean["lease"] - mean["baseline"]) * price
    text = figure_costs(raw)["cpu_ratio_lease"]
    assert text.startswith(f"${added:.3f} per million events"), text
