"""The project's functions: one module each, business logic plus its `trigger_once` wrapping.

`main.py` exports them under their deployed names. Shared pieces: `http_delivery` (POST with an
idempotency key, failures classified as retryable or terminal) and `notifier` (HTTP or FCM).
"""
