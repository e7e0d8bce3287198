"""`python -m soak [--seconds N] [--out soak/results.json] ...`: run the chaos soak.

Writes the results JSON (integer keys events, deliveries, kills, restarts, injected_faults,
effects, violations, deaths_in_drain; violation_examples; wall_s, drain_s, longest_delivery_s,
function_timeout_s; details, with the violations of every check and the effects of every
function), prints a summary and exits 1 on any violation, 2 when the emulator cannot be
started.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from soak.driver import Soak, SoakSettings
from soak.emulator import ROOT, EmulatorError

DEFAULT_OUT = ROOT / "soak" / "results.json"


def parse(argv: list[str]) -> tuple[SoakSettings, Path]:
    """Settings from the command line: one option per `SoakSettings` field."""
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON path")
    for f in dataclasses.fields(SoakSettings):
        kind = type(f.default)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=f.default,
            help=f"default {f.default}",
        )
    args = parser.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(SoakSettings)}
    return SoakSettings(**values), args.out


def summary(results: dict[str, object]) -> str:
    """The lines printed at the end of a run."""
    lines = [
        "soak: {events} events, {deliveries} deliveries, {kills} kills, {restarts} emulator "
        "restarts, {injected_faults} injected faults, {effects} effects, {wall_s} s".format(
            **results
        ),
        "soak: drain {drain_s} s with {deaths_in_drain} deaths in it; longest delivery "
        "{longest_delivery_s} s against a function timeout of {function_timeout_s} s".format(
            **results
        ),
    ]
    details = results.get("details")
    if isinstance(details, dict) and "effects_by_function" in details:
        by_function = ", ".join(f"{k} {v}" for k, v in details["effects_by_function"].items())
        lines.append(f"soak: effects by function: {by_function}")
        steps = details["steps"]
        lines.append(
            "soak: steps: {post_applied} keyed POSTs applied for {post_keys} keys; "
            "{receipts_applied} receipts applied, {receipts_interrupted} interrupted "
            "({receipts_interrupted_after_effect} after the receipt), skipped by "
            "{receipts_skipped} events' handlers".format(**steps)
        )
    lines.append(f"soak: {results['violations']} violations")
    examples = results.get("violation_examples")
    if isinstance(examples, list):
        lines += [f"  - {example}" for example in examples]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run, write the results, print the summary; 1 on any violation."""
    settings, out = parse(argv)
    try:
        results = Soak(settings).run()
    except EmulatorError as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(summary(results))
    print(f"soak: results in {out}")
    return 1 if results["violations"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
