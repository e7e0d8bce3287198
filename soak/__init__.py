"""The chaos soak (`make soak`, `python -m soak`): exactly-once checked from the effects.

Several function processes (`soak.worker`) serve a lease, a transaction and a write-only
function, and one of durable steps (`soak.functions`), through the public `dedup` API, on a
Firestore emulator the soak owns and restarts (`soak.emulator`). A driver (`soak.driver`) plays
the platform: thousands of events, each delivered several times concurrently, redelivered until
acknowledged, while processes are SIGKILLed, commit responses are lost (`soak.faults`) and the
receiver fails, stalls and goes down (`soak.receiver_chaos`). `soak.checks` then judges the
effects. See docs/soak.md.
"""
