"""What firebase-functions' `set_global_options` declared, read when a function is declared: the
function timeout a lease must outlast, on the platform.

`trigger_once` runs under the platform's decorator, which declares a function's own
`timeout_sec` only after `trigger_once` has returned; what a function can see at its declaration
is the global options that `set_global_options` set before it. So, where the instance runs on
the platform (`on_the_platform`), a global timeout that `DEDUP_LEASE_SECONDS` does not outlast
(plus `DEDUP_RPC_TIMEOUT_SECONDS`) stops the import with the `ConfigError` that names the value
to set (`dedup.entrance.gate`). A function that sets a shorter timeout of its own is judged on
the global one, the longer: the lease this asks for is safe for it too, only longer than it
needs. Locally, in tests and in the Functions emulator nothing is checked: short leases there
are deliberate.

The one private attribute read, checked with firebase-functions 0.6.0 (pinned in
requirements.txt): `firebase_functions.options._GLOBAL_OPTIONS` (the `RuntimeOptions` that
`set_global_options` replaces), its `timeout_sec`. Nothing is read when firebase-functions'
options module is not loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping


def global_timeout_seconds() -> int | None:
    """The `timeout_sec` of `set_global_options`, when one was set as a number of seconds."""
    options = sys.modules.get("firebase_functions.options")
    if options is None:
        return None
    timeout = getattr(getattr(options, "_GLOBAL_OPTIONS", None), "timeout_sec", None)
    return timeout if type(timeout) is int else None


def on_the_platform(environ: Mapping[str, str]) -> bool:
    """True in a deployed instance (Cloud Run's `K_SERVICE`), False locally and in the Functions
    emulator (which sets `FUNCTIONS_EMULATOR=true`)."""
    return bool(environ.get("K_SERVICE")) and environ.get("FUNCTIONS_EMULATOR") != "true"
