"""The process's shared front doors: one registry of default instances, by class and config.

`dedup.default_deduplicator` and `dedup.aio.default_async_deduplicator` come from here, so every
function of a process that asks for the default shares one front door, and its Firestore
client, per class and config.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from dedup.config import DedupConfig

_lock = threading.Lock()
_instances: dict[tuple[object, DedupConfig | None], object] = {}


def default_instance[D](
    kind: Callable[[DedupConfig | None], D], config: DedupConfig | None = None
) -> D:
    """The process's shared front door made by `kind` (a front door's class) for `config`
    (None: from the environment): created on first request without touching the network; later
    calls with an equal config return the same instance, so every function shares one
    Firestore client."""
    with _lock:
        found = _instances.get((kind, config))
        if found is None:
            found = _instances[(kind, config)] = kind(config)
        return cast(D, found)
