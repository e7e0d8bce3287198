"""`python -m bench.http`: the price of an idempotent HTTP request (`dedup.http`), on the
Firestore emulator (FIRESTORE_EMULATOR_HOST must be set: run it under
`tools/emulators.py exec --only firestore`).

One Flask app in this process (functions-framework's test client, so no network hop) serves
the same handler three ways: undeduplicated, `idempotent_http` in lease mode and in
transaction mode (the handler writes one document). For each, N requests with fresh keys
(a fresh request), the same N keys again (a replay) and, in lease mode, a copy of a request
whose first is still running (a 409: this instance knows the lease, so no RPC). Printed:
Firestore RPCs per request and latency percentiles (p50, p95) in milliseconds. The endpoints
are anonymous: ID-token verification (local once the certificates are cached) is left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import flask
from flask.testing import FlaskClient

from bench.rpc_count import RpcCounter, counting_client
from dedup import DedupConfig, Deduplicator, Mode, SuffixRegistry
from dedup.http import IdempotentRequest, idempotent_http
from dedup.kernel.transitions import dedup_key


def _app(counter: RpcCounter) -> tuple[FlaskClient, threading.Event, Deduplicator]:
    client = counting_client(counter)
    config = DedupConfig(cache_size=0, on_payload_mismatch="raise")
    dedup = Deduplicator(config, client=client)
    registry = SuffixRegistry()
    release = threading.Event()
    release.set()

    def work(call: IdempotentRequest | None, writer: Any = None) -> flask.Response:
        ref = client.collection("benchOrders").document()
        fields = {"item": "coffee"}
        if writer is not None:
            writer.create(ref, fields)
        else:
            ref.create(fields)
        release.wait()
        return flask.Response(json.dumps({"orderId": ref.id}), 201, content_type="application/json")

    @idempotent_http("bench_lease", anonymous=True, deduplicator=dedup, registry=registry)
    def lease(call: IdempotentRequest) -> flask.Response:
        return work(call)

    @idempotent_http(
        "bench_tx",
        mode=Mode.TRANSACTION,
        anonymous=True,
        deduplicator=dedup,
        registry=registry,
    )
    def transaction(call: IdempotentRequest) -> flask.Response:
        return work(call, call.delivery.transaction)

    app = flask.Flask("bench_http")
    app.add_url_rule("/plain", "plain", lambda: work(None), methods=["POST"])
    app.add_url_rule("/lease", "lease", lambda: lease(flask.request), methods=["POST"])
    app.add_url_rule("/tx", "tx", lambda: transaction(flask.request), methods=["POST"])
    return app.test_client(), release, dedup


def _timed(
    counter: RpcCounter, send: Callable[[], Any], expected: int
) -> tuple[float, Counter[str]]:
    with counter.scope() as rpcs:
        started = time.perf_counter()
        status = send().status_code
        elapsed = (time.perf_counter() - started) * 1000
    if status != expected:
        raise SystemExit(f"expected {expected}, got {status}")
    return elapsed, rpcs.calls


def _row(name: str, samples: list[tuple[float, Counter[str]]]) -> dict[str, Any]:
    latencies = sorted(ms for ms, _ in samples)
    rpcs = sum(sum(c.values()) for _, c in samples) / len(samples)
    return {
        "request": name,
        "rpcs": round(rpcs, 2),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 1),
    }


def run(requests: int) -> list[dict[str, Any]]:
    """Every row (see the module docstring)."""
    counter = RpcCounter()
    api, release, dedup = _app(counter)
    body = json.dumps({"item": "coffee"})

    def post(path: str, key: str | None) -> Callable[[], Any]:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        return lambda: api.post(path, data=body, headers=headers)

    plain = [_timed(counter, post("/plain", None), 201) for _ in range(requests)]
    rows = [_row("undeduplicated", plain)]
    for path, mode in (("/lease", "lease"), ("/tx", "transaction")):
        keys = [str(uuid.uuid4()) for _ in range(requests)]
        rows.append(_row(f"{mode}: fresh", [_timed(counter, post(path, k), 201) for k in keys]))
        rows.append(_row(f"{mode}: replay", [_timed(counter, post(path, k), 201) for k in keys]))
    conflicts = []
    for _ in range(requests):
        key = str(uuid.uuid4())
        release.clear()
        first = threading.Thread(target=post("/lease", key))
        first.start()
        while not dedup.live_leases.live(dedup_key(key, "bench_lease")):
            time.sleep(0.005)  # until the first request holds the lease
        conflicts.append(_timed(counter, post("/lease", key), 409))
        release.set()
        first.join()
    rows.append(_row("lease: 409 (first still running)", conflicts))
    return rows


def main() -> None:
    """Print the rows as a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    rows = run(parser.parse_args().requests)
    print("| request | Firestore RPCs | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['request']} | {row['rpcs']} | {row['p50_ms']} | {row['p95_ms']} |")


if __name__ == "__main__":
    main()
