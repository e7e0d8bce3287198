"""The project's functions: one module each, business logic plus its `trigger_once` wrapping.

`main.py` exports them under their deployed names. Shared pieces: `http_delivery` (POST with an
idempotency key, failures classified as retryable or terminal) and `notifier` (HTTP or FCM).

`set_global_options` below is the one declaration of the functions' runtime shape. It lives
here, in the package, so it runs before any function module is declared, whichever is imported
first (`main.py`, a test, a tool): the decorators copy the options when they run, and a module
declared before them would deploy with the platform's defaults.
"""

from firebase_functions import options

options.set_global_options(
    memory=options.MemoryOption.MB_512,
    cpu=1,
    concurrency=80,
    min_instances=0,
    max_instances=10,
    timeout_sec=50,  # DEDUP_LEASE_SECONDS (60) must be >= this + DEDUP_RPC_TIMEOUT_SECONDS (10)
)
