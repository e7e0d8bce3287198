"""`make demo`: the at-least-once platform played on the local emulators (see `demo.story`).

Also used by the tests: `demo.events` builds real CloudEvents, `demo.receiver` records HTTP
deliveries, `demo.serve` serves a function from `main.py` as Cloud Run would.
"""
