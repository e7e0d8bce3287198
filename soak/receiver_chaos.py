"""The receiver's faults: the driver scripts failures, delays and outages into the recording
receiver (`demo.receiver`) while the soak injects faults.

Every `interval` seconds on average (`--receiver-fault-interval`), one of:

* `fail`: the next 1-6 POSTs to each path the functions send to answer 500, 502 or 503;
* `slow`: the next 1-6 answer 200 after 0.2-2 s;
* `slow-fail`: the next 1-6 answer 503 after 0.2-1.5 s;
* `down`: the port is closed for 0.3-1.5 s (connections refused), on every path at once.

Each scripted answer counts as one injected fault, an outage as one. The paths are the
notification's, the `steps` function's keyed step's and its at-most-once step's
(`soak.functions`): each gets its own script of the drawn kind.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from demo.receiver import Receiver
from soak.functions import NOTIFY_PATH, RECEIPT_PATH, STEP_POST_PATH

FAULT_PATHS = (NOTIFY_PATH, STEP_POST_PATH, RECEIPT_PATH)
"""The receiver's paths the soak's functions POST to, each scripted to fail."""
KINDS = ("fail", "slow", "slow-fail", "down")


def answers(kind: str, k: int, rng: random.Random) -> list[tuple[int, float]]:
    """`k` scripted (status, delay seconds) answers of `kind` (not `down`)."""
    if kind == "fail":
        return [(rng.choice((500, 502, 503)), 0.0) for _ in range(k)]
    if kind == "slow":
        return [(200, rng.uniform(0.2, 2.0)) for _ in range(k)]
    return [(503, rng.uniform(0.2, 1.5)) for _ in range(k)]


def receiver_chaos(
    receiver: Receiver,
    rng: random.Random,
    calm: threading.Event,
    interval: float,
    injected: Callable[[int], None],
) -> None:
    """Script faults into `receiver` until `calm` is set; `injected(n)` counts each batch."""
    while not calm.wait(rng.expovariate(1 / interval)):
        k = rng.randint(1, 6)
        kind = rng.choice(KINDS)
        if kind == "down":
            receiver.down()
            calm.wait(rng.uniform(0.3, 1.5))
            receiver.up()
            injected(1)
            continue
        for path in FAULT_PATHS:
            receiver.script(path, *answers(kind, k, rng))
        injected(k * len(FAULT_PATHS))
