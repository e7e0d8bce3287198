"""Settings of a `Deduplicator`: one frozen dataclass, with defaults read from the environment.

`DedupConfig()` holds the documented defaults; `DedupConfig.from_env()` overrides them from
DEDUP_* variables. Every value is validated on construction, so a bad setting fails with a
`ConfigError` naming the setting, not in the middle of an event. A DEDUP_* variable that is not
one of `ENVIRONMENT_VARIABLES` (a misspelling such as DEDUP_RETENTON_DAYS) is refused too; the
variables and how their text is read are `dedup.environment`'s.

The lease must outlast the function's timeout plus `rpc_timeout_seconds`, and a delivery's
time budget is that timeout (`DedupConfig.time_budget`): docs/configuration.md, "The lease and
the function timeout" and "The time budget of a delivery".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property, partial
from typing import Literal

from dedup.environment import ENVIRONMENT_VARIABLES as ENVIRONMENT_VARIABLES
from dedup.environment import FUNCTION_TIMEOUT_VARIABLE as FUNCTION_TIMEOUT_VARIABLE
from dedup.environment import GIVE_UP_ANSWERS as GIVE_UP_ANSWERS
from dedup.environment import OTEL_VALUES as OTEL_VALUES
from dedup.environment import float_var, int_var, refuse_unknown_variables
from dedup.environment import telemetry_enabled as telemetry_enabled
from dedup.errors import ConfigError
from dedup.kernel.budget import Budget
from dedup.kernel.budget import BudgetSource as BudgetSource
from dedup.kernel.budget import TimeBudget as TimeBudget
from dedup.kernel.claims import AttemptLimit
from dedup.kernel.transitions import KEY_LAYOUTS, KeyLayout

PayloadMismatchPolicy = Literal["log", "raise"]
"""What to do when a key arrives with a payload fingerprint other than the recorded one."""
GiveUpAnswer = Literal["ack", "nack"]
"""How an event function answers a delivery of an event given up on (`DedupConfig.on_give_up`)."""

DEFAULT_COLLECTION = "triggerEvents"
DEFAULT_LEASE_SECONDS = 60
DEFAULT_RETENTION_DAYS = 7
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_MIN_RETRY_SECONDS = 600
DEFAULT_CACHE_SIZE = 1000
DEFAULT_RPC_TIMEOUT_SECONDS = 10
"""The RPC timeout a lease of 30 s or more gets when none is set (`rpc_timeout_for`)."""


class _FollowsLease(int):
    """An RPC timeout nobody set: a number (10 as the default, as released), told apart from one
    given on purpose by its type, and worked out again from the lease whenever a config is made
    (`rpc_timeout_for`), so `dataclasses.replace(config, lease_seconds=5)` follows the new
    lease instead of keeping the old lease's timeout."""

    __slots__ = ()


RPC_TIMEOUT_FOLLOWS_LEASE: int = _FollowsLease(DEFAULT_RPC_TIMEOUT_SECONDS)
"""`rpc_timeout_seconds` (DEDUP_RPC_TIMEOUT_SECONDS) not set: it follows the lease
(`rpc_timeout_for`)."""
DEFAULT_DATABASE = "(default)"

_COLLECTION_SEGMENT = r"[^/]+"

utc_now: Callable[[], datetime] = partial(datetime.now, UTC)
"""The instance's current time, timezone-aware (UTC): the default `DedupConfig.clock`. A
`partial` of `datetime.now`, named like a function of this module, so reading the clock runs no
Python code on a delivery's path."""
for _attribute, _value in (("__module__", __name__), ("__qualname__", "utc_now")):
    setattr(utc_now, _attribute, _value)


@dataclass(frozen=True)
class DedupConfig:
    """Validated settings of one `Deduplicator`; immutable, safe to share between threads.

    Raises `ConfigError` on construction when a value is out of range.
    """

    collection: str = DEFAULT_COLLECTION
    """Collection path of the dedup records (`triggerEvents`); DEDUP_COLLECTION."""

    lease_seconds: int = DEFAULT_LEASE_SECONDS
    """Lease length on the database clock; at least the function timeout plus
    `rpc_timeout_seconds` (docs/configuration.md). DEDUP_LEASE_SECONDS."""

    retention_days: int = DEFAULT_RETENTION_DAYS
    """How long records are kept: `expireAt` = now + this, for a Firestore TTL policy.
    Keep it longer than the platform's retry window (24 hours for 2nd gen functions, see
    docs/platform.md), or a late redelivery finds no record and runs again.
    DEDUP_RETENTION_DAYS."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts before the record becomes `dead`: in lease mode every handler start, crashed
    ones included; in the transaction and write-only modes every attempt that failed with an
    exception (a crashed one leaves nothing behind, so it is not counted).

    10 lets the platform's exponential backoff (10 s doubling to 600 s, docs/platform.md)
    ride out a downstream outage of about 40 minutes, yet stops a poison event (in lease
    mode even one that crashes the process) instead of letting it retry for the whole retry
    window. An event is not given up before `min_retry_seconds` either. DEDUP_MAX_ATTEMPTS
    (>= 1)."""

    max_event_age_seconds: float | None = None
    """Events older than this (by the event's own time versus the instance clock) are
    dropped as `too_old`; None = no limit. DEDUP_MAX_EVENT_AGE_SECONDS."""

    project: str | None = None
    """Google Cloud project; None lets the client infer it. GOOGLE_CLOUD_PROJECT or
    GCLOUD_PROJECT."""

    database: str | None = None
    """Firestore database id of the records; None: the database of the triggering event (a
    function on a named database keeps its records there, docs/named-databases.md), else
    `(default)`. DEDUP_DATABASE."""

    cache_size: int = DEFAULT_CACHE_SIZE
    """Capacity of the per-instance LRU of keys known sent (0 disables it). DEDUP_CACHE_SIZE."""

    rpc_timeout_seconds: int = RPC_TIMEOUT_FOLLOWS_LEASE
    """Deadline of each dedup read and write, retries of transient errors included: when
    Firestore is unreachable a delivery fails with `StoreUnavailable` after about this long
    instead of the client library's 60 s (writes) to 300 s (reads). A transaction's begin,
    commit and rollback are bounded the same way (`dedup.platform.firestore_internals`).
    Not set: it follows the lease, a third of `lease_seconds`, 1 s at least and 10 s at most
    (`rpc_timeout_for`: 10 s for the default 60 s lease and any of 30 s or more, 1 s for a
    test's lease of 1 to 5 s), so that a short lease still leaves a delivery a working time
    budget; read back, it is the timeout in force. Set, it is kept. DEDUP_RPC_TIMEOUT_SECONDS."""

    on_payload_mismatch: PayloadMismatchPolicy = "log"
    """"log": report at ERROR and treat the delivery as the recorded event; "raise": raise
    `PayloadMismatch`. DEDUP_ON_PAYLOAD_MISMATCH."""

    function_timeout_seconds: int | None = None
    """The timeout of the function this config serves, when known: the delivery's time budget
    (`time_budget`); `lease_seconds` must be at least this plus `rpc_timeout_seconds`. The
    gcloud and Cloud Run deploys set it per function to the `--timeout` they deploy it with (not
    by hand: refused in `.env`). None: the function's declared timeout (firebase-functions),
    else the lease's bound. DEDUP_FUNCTION_TIMEOUT_SECONDS."""

    otel: bool = False
    """Whether the functions install the OpenTelemetry SDK with the Cloud Trace and Cloud
    Monitoring exporters at start-up (`functions.observability`, docs/observability.md); the
    library itself only calls the OpenTelemetry API. DEDUP_OTEL (1 or 0)."""

    key_layout: KeyLayout = "plain"
    """Record keys: "plain" (`<event id>-<suffix>`) or "spread" (a 4-hex hash prefix, beyond
    about 250 new events per second per collection, docs/capacity.md). Fixed for the life of a
    collection: switching it hides the records already written. DEDUP_KEY_LAYOUT."""

    clock: Callable[[], datetime] = field(default=utc_now, repr=False)
    """The instance clock (timezone-aware). Used only for `expireAt` and `max_event_age`;
    leases are judged on the database clock. Injectable for tests."""

    min_retry_seconds: int = DEFAULT_MIN_RETRY_SECONDS
    """How long an event that keeps failing is retried, at least, from its first attempt
    (database clock) before it may become `dead`: `dead` needs `max_attempts` attempts *and*
    this age (`dedup.kernel.claims.AttemptLimit`). A transport that redelivers fast (a Cloud Tasks
    queue's own backoff, a redrive, a manual run) can spend ten attempts in seconds while a
    downstream is down or instances are killed; 600 s lets such an outage end first. Under
    the platform's 10-600 s backoff ten attempts take about 40 minutes, so it never binds
    there. 0: attempts alone decide. DEDUP_MIN_RETRY_SECONDS (>= 0)."""

    on_give_up: GiveUpAnswer = "ack"
    """How an event function (`trigger_once`) answers a delivery that records its event failed,
    dead or unknown, or finds it so (nothing runs it again until `dedup revive`): "ack"
    returns normally (2xx) and the platform drops the event; "nack" answers 500
    (`dedup.errors.GivenUp`), so the transport redelivers it, each time without running it,
    until its own count of attempts ends and its dead-letter topic keeps the event for `dedup
    dead-letters redrive`. The Cloud Run path sets "nack" on every event function
    (docs/deploy.md); elsewhere no dead-letter topic would keep it. DEDUP_ON_GIVE_UP."""

    budget_clock: Callable[[], float] | None = field(default=None, repr=False)
    """The clock of each delivery's time budget (`dedup.kernel.budget.Budget`), in seconds;
    None: `time.monotonic`. Injectable for tests."""

    def __post_init__(self) -> None:
        """Validate every setting; raise `ConfigError` naming the first bad one."""
        segments = self.collection.split("/")
        if len(segments) % 2 != 1 or not all(
            re.fullmatch(_COLLECTION_SEGMENT, s) for s in segments
        ):
            raise ConfigError(
                f"collection (DEDUP_COLLECTION) must be a collection path such as "
                f"'triggerEvents' or 'dedup/app/triggerEvents'; got {self.collection!r}"
            )
        _require_at_least("lease_seconds (DEDUP_LEASE_SECONDS)", self.lease_seconds, 1)
        _require_at_least("retention_days (DEDUP_RETENTION_DAYS)", self.retention_days, 1)
        _require_at_least("max_attempts (DEDUP_MAX_ATTEMPTS)", self.max_attempts, 1)
        _require_at_least("min_retry_seconds (DEDUP_MIN_RETRY_SECONDS)", self.min_retry_seconds, 0)
        _require_at_least("cache_size (DEDUP_CACHE_SIZE)", self.cache_size, 0)
        if type(self.rpc_timeout_seconds) is _FollowsLease:
            follows = _FollowsLease(rpc_timeout_for(self.lease_seconds))
            object.__setattr__(self, "rpc_timeout_seconds", follows)
        _require_at_least(
            "rpc_timeout_seconds (DEDUP_RPC_TIMEOUT_SECONDS)", self.rpc_timeout_seconds, 1
        )
        age = self.max_event_age_seconds
        if age is not None and (isinstance(age, bool) or not age > 0):
            raise ConfigError(
                "max_event_age_seconds (DEDUP_MAX_EVENT_AGE_SECONDS) must be a positive number "
                f"of seconds, or unset for no limit; got {age!r}"
            )
        if self.on_payload_mismatch not in ("log", "raise"):
            raise ConfigError(
                "on_payload_mismatch (DEDUP_ON_PAYLOAD_MISMATCH) must be 'log' or 'raise'; "
                f"got {self.on_payload_mismatch!r}"
            )
        if self.on_give_up not in GIVE_UP_ANSWERS:
            raise ConfigError(
                f"on_give_up (DEDUP_ON_GIVE_UP) must be 'ack' or 'nack'; got {self.on_give_up!r}"
            )
        if self.key_layout not in KEY_LAYOUTS:
            raise ConfigError(
                f"key_layout (DEDUP_KEY_LAYOUT) must be one of {', '.join(KEY_LAYOUTS)}; "
                f"got {self.key_layout!r}"
            )
        if self.database is not None and not self.database:
            raise ConfigError(
                "database (DEDUP_DATABASE) must be a Firestore database id such as '(default)' "
                "or 'orders', or unset for the triggering event's database"
            )
        if self.function_timeout_seconds is not None:
            self.check_lease_covers(self.function_timeout_seconds)

    @property
    def attempt_limit(self) -> AttemptLimit:
        """When an event that keeps failing becomes `dead`: `max_attempts` attempts, and
        `min_retry_seconds` since the first (`dedup.kernel.claims.AttemptLimit`)."""
        return AttemptLimit(self.max_attempts, self.min_retry_seconds)

    @cached_property
    def delivery_budget_seconds(self) -> float:
        """How long one delivery may take when its function declares no timeout of its own
        (`time_budget()`): `function_timeout_seconds` when known, else the lease's bound."""
        return self.time_budget().seconds

    def time_budget(self, declared_timeout: int | None = None) -> TimeBudget:
        """How long one delivery may take, and which bound that is (`Budget.length_of`, with
        this config's settings; docs/configuration.md, "The time budget of a delivery").
        `declared_timeout`: the function's `timeout_sec`, when known."""
        if declared_timeout is None:
            return self._undeclared_time_budget
        return self._time_budget(declared_timeout)

    @cached_property
    def _undeclared_time_budget(self) -> TimeBudget:
        """`time_budget()`, worked out once: every explicit `run` asks it."""
        return self._time_budget(None)

    def _time_budget(self, declared_timeout: int | None) -> TimeBudget:
        return Budget.length_of(
            self.function_timeout_seconds,
            declared_timeout,
            self.lease_seconds,
            self.rpc_timeout_seconds,
        )

    def check_lease_covers(self, timeout: int) -> None:
        """Refuse (`ConfigError`, saying what to set) a function timeout of `timeout` seconds
        that this config's lease does not cover: `lease_seconds` must be at least the timeout
        plus `rpc_timeout_seconds`, the deadline of the "sent" write after the effect, or a
        redelivery could take the lease over while the first run still works. The one rule,
        used at import (`trigger_once` and the other decorators), at start-up
        (`functions/runtime.py`) and by the deploy tools."""
        _require_at_least("function_timeout_seconds", timeout, 1)
        needed = timeout + self.rpc_timeout_seconds
        if self.lease_seconds < needed:
            raise ConfigError(
                f"lease_seconds (DEDUP_LEASE_SECONDS) is {self.lease_seconds} s but the function "
                f"timeout is {timeout} s: a redelivery could take the lease over while the first "
                f"run still works. Set DEDUP_LEASE_SECONDS to at least {needed} (the timeout plus "
                f"DEDUP_RPC_TIMEOUT_SECONDS={self.rpc_timeout_seconds}, the deadline of the "
                "'sent' write that follows the effect), or lower the function's timeout_sec."
            )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        function_timeout_seconds: int | None = None,
    ) -> DedupConfig:
        """Defaults overridden by DEDUP_* variables (and the project variables).

        `environ` defaults to `os.environ`. Empty variables count as unset. Raises
        `ConfigError` naming the variable and the accepted form when a value is malformed, when
        a DEDUP_* variable is not one of `ENVIRONMENT_VARIABLES` (the message lists them), and
        when the function's timeout (`function_timeout_seconds` when given, else
        DEDUP_FUNCTION_TIMEOUT_SECONDS) is one the lease does not cover.
        """
        env = os.environ if environ is None else environ
        refuse_unknown_variables(env)

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        age = get("DEDUP_MAX_EVENT_AGE_SECONDS")
        policy = get("DEDUP_ON_PAYLOAD_MISMATCH") or "log"
        if policy not in ("log", "raise"):
            raise ConfigError(f"DEDUP_ON_PAYLOAD_MISMATCH must be 'log' or 'raise'; got {policy!r}")
        give_up = (get("DEDUP_ON_GIVE_UP") or "ack").lower()
        if give_up not in GIVE_UP_ANSWERS:
            raise ConfigError(
                "DEDUP_ON_GIVE_UP must be 'ack' (answer 2xx: the platform drops an event given "
                "up on) or 'nack' (answer 500: its dead-letter topic keeps it); got "
                f"{env['DEDUP_ON_GIVE_UP']!r}"
            )
        timeout = function_timeout_seconds
        if timeout is None and get(FUNCTION_TIMEOUT_VARIABLE) is not None:
            timeout = int_var(get, FUNCTION_TIMEOUT_VARIABLE, 50)  # the deployed --timeout
        layout = get("DEDUP_KEY_LAYOUT") or "plain"
        if layout not in KEY_LAYOUTS:
            raise ConfigError(
                f"DEDUP_KEY_LAYOUT must be one of {', '.join(KEY_LAYOUTS)}; got {layout!r}"
            )
        return cls(
            collection=get("DEDUP_COLLECTION") or DEFAULT_COLLECTION,
            lease_seconds=int_var(get, "DEDUP_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
            retention_days=int_var(get, "DEDUP_RETENTION_DAYS", DEFAULT_RETENTION_DAYS),
            max_attempts=int_var(get, "DEDUP_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS),
            min_retry_seconds=int_var(get, "DEDUP_MIN_RETRY_SECONDS", DEFAULT_MIN_RETRY_SECONDS),
            max_event_age_seconds=None
            if age is None
            else float_var("DEDUP_MAX_EVENT_AGE_SECONDS", age),
            project=get("GOOGLE_CLOUD_PROJECT") or get("GCLOUD_PROJECT"),
            database=get("DEDUP_DATABASE"),
            otel=telemetry_enabled(env),
            cache_size=int_var(get, "DEDUP_CACHE_SIZE", DEFAULT_CACHE_SIZE),
            rpc_timeout_seconds=int_var(
                get, "DEDUP_RPC_TIMEOUT_SECONDS", RPC_TIMEOUT_FOLLOWS_LEASE
            ),
            on_payload_mismatch="raise" if policy == "raise" else "log",
            function_timeout_seconds=timeout,
            key_layout="spread" if layout == "spread" else "plain",
            on_give_up="nack" if give_up == "nack" else "ack",
        )


def rpc_timeout_for(lease_seconds: int) -> int:
    """The RPC timeout (`DedupConfig.rpc_timeout_seconds`) a lease of `lease_seconds` gets when
    none is set: a third of it, 1 s at least, `DEFAULT_RPC_TIMEOUT_SECONDS` (10 s) at most. The
    lease then covers a time budget of `lease_seconds` - this, two thirds or more of a lease:
    4 s of a 5 s lease, where a 10 s timeout left the 1 s floor (`Budget.length_of`)."""
    return min(DEFAULT_RPC_TIMEOUT_SECONDS, max(1, lease_seconds // 3))


def _require_at_least(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}; got {value!r}")
