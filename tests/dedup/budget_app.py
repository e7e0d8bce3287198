"""A firebase-functions function with a timeout of its own, served by functions-framework for
`tests/dedup/test_function_budget.py`: a Pub/Sub function declared with `timeout_sec=20` under a
global `timeout_sec=300`, whose handler says it ran (the file `BUDGET_RAN`), then waits (10 s
at most) until the test has cut the instance off Firestore (the file `BUDGET_CUT`)."""

import os
import time
from pathlib import Path
from typing import Any

from firebase_functions import options, pubsub_fn

from dedup import Delivery, trigger_once

options.set_global_options(timeout_sec=300)


@pubsub_fn.on_message_published(topic="budget", timeout_sec=20)
@trigger_once("budgetJob")
def budget_job(event: Any, delivery: Delivery) -> None:
    """The effect is done once the handler returns; only "sent" is left to write."""
    Path(os.environ["BUDGET_RAN"]).write_text("ran")
    cut = Path(os.environ["BUDGET_CUT"])
    waited_until = time.monotonic() + 10
    while not cut.exists() and time.monotonic() < waited_until:
        time.sleep(0.05)
