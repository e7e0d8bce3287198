"""How a request with an idempotency key ends: `settle` runs the handler once per (event id,
suffix) or finds how an earlier request with the key ended, and `replay` answers a request
whose key completed. Shared by the HTTP and the callable adapters."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import flask

from dedup.config import DedupConfig
from dedup.core import Deduplicator, default_deduplicator
from dedup.decorator import DEFAULT_REGISTRY, SuffixRegistry
from dedup.delivery import Delivery, HandlerResult, OutcomeKind
from dedup.errors import ConfigError, LeaseHeld, LeaseLost, PayloadMismatch, StoreUnavailable
from dedup.http.problems import Problem
from dedup.idempotency import REPLAYED_HEADER, NotStored, StoredResponse
from dedup.keys import dedup_key
from dedup.record import Mode

WAIT_POLL_SECONDS = 0.2
"""How often a request waiting for the first one with its key (`wait_seconds`) looks again."""


def replay(stored: StoredResponse | NotStored) -> flask.Response:
    """The answer to a request whose key completed: the stored response with
    `Idempotent-Replayed: true`, or the `response-not-stored` problem."""
    if isinstance(stored, NotStored):
        extra: dict[str, Any] = {}
        if stored.status is not None:
            extra = {"originalStatus": stored.status, "bytes": stored.size, "sha256": stored.sha256}
            detail = (
                f"the request with this key completed with status {stored.status}, but its "
                "response was too large to keep for replays; fetch the resource instead of "
                "retrying, or send a new request with a new key"
            )
        else:
            detail = (
                "the request with this key ended without a response to replay (it failed "
                "too many times); send it again with a new Idempotency-Key"
            )
        problem = Problem(410, "response-not-stored", "Response not stored", detail, extra=extra)
        response = problem.response()
    else:
        response = stored_answer(stored)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def stored_answer(stored: StoredResponse) -> flask.Response:
    """The stored response as an HTTP answer (status, body, `Content-Type`, `Location`)."""
    response = flask.Response(stored.body, stored.status)
    del response.headers["Content-Type"]
    if stored.content_type is not None:
        response.headers["Content-Type"] = stored.content_type
    if stored.location is not None:
        response.headers["Location"] = stored.location
    return response


class Settled(StrEnum):
    """How `settle` ended a request."""

    RAN = "ran"
    """The handler ran now; its result is stored."""
    COMPLETED = "completed"
    """An earlier request with the key completed: replay the stored result."""
    IN_PROGRESS = "in_progress"
    """Another request with the key is running (still, after `wait_seconds`)."""
    MISMATCH = "mismatch"
    """The key was used for a request with another fingerprint."""
    UNAVAILABLE = "unavailable"
    """Firestore could not be reached."""


@dataclass(frozen=True)
class Settlement:
    """What `settle` decided, with the stored result of a completed request."""

    kind: Settled
    result: Mapping[str, Any] | None = None


def settle(
    runner: Deduplicator,
    event_id: str,
    suffix: str,
    handler: Callable[[Delivery], HandlerResult],
    *,
    mode: Mode,
    payload: bytes,
    wait_seconds: float,
) -> Settlement:
    """Run `handler` once for (event_id, suffix) or find how an earlier request ended.

    The handler's own exceptions propagate (the core has released the lease or counted the
    attempt first); the dedup errors become a `Settlement`.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            outcome = runner.run(event_id, suffix, handler, mode=mode, payload=payload)
        except (LeaseHeld, LeaseLost):
            if time.monotonic() + WAIT_POLL_SECONDS > deadline:
                return Settlement(Settled.IN_PROGRESS)
            time.sleep(WAIT_POLL_SECONDS)
            continue
        except PayloadMismatch:
            return Settlement(Settled.MISMATCH)
        except StoreUnavailable:
            return Settlement(Settled.UNAVAILABLE)
        if outcome.kind is OutcomeKind.RAN:
            return Settlement(Settled.RAN, outcome.result)
        result = outcome.result
        if outcome.kind is OutcomeKind.DUPLICATE_CACHED:  # a deduplicator with a key cache
            record = runner.store.read(dedup_key(event_id, suffix)).record
            result = record.result if record is not None else None
        return Settlement(Settled.COMPLETED, result)


def _http_config() -> DedupConfig:
    """The environment's config, with what HTTP needs: no key cache (a duplicate must read the
    stored response) and payload mismatches raised (answered 422)."""
    return replace(DedupConfig.from_env(), cache_size=0, on_payload_mismatch="raise")


def http_deduplicator() -> Deduplicator:
    """The process's shared deduplicator for HTTP and callable functions (see `_http_config`)."""
    return default_deduplicator(_http_config())


def _runner_for(
    deduplicator: Deduplicator | None, config: DedupConfig | None
) -> Callable[[], Deduplicator]:
    if config is not None and deduplicator is not None:
        raise ConfigError("pass either config or deduplicator, not both")
    if deduplicator is not None:
        if deduplicator.config.on_payload_mismatch != "raise":
            raise ConfigError(
                "an HTTP deduplicator must refuse reused keys: build it with "
                "DedupConfig(on_payload_mismatch='raise', cache_size=0)"
            )
        return lambda: deduplicator
    if config is not None:
        fixed = replace(config, cache_size=0, on_payload_mismatch="raise")
        return lambda: default_deduplicator(fixed)
    return http_deduplicator


def _register(registry: SuffixRegistry | None, suffix: str, handler: Callable[..., Any]) -> None:
    owner = f"{handler.__module__}.{handler.__qualname__}"
    (registry if registry is not None else DEFAULT_REGISTRY).register(suffix, owner)


_COPIED_ATTRIBUTES = ("__module__", "__name__", "__qualname__", "__doc__")


def _copy_identity(target: Any, source: Any) -> None:
    # Name and doc only, not the signature (frameworks must see the wrapper's).
    for attribute in _COPIED_ATTRIBUTES:
        setattr(target, attribute, getattr(source, attribute, None))
