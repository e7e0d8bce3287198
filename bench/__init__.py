"""`make bench`: the price of exactly-once, measured side by side with the alternatives.

Runs against the Firestore emulator named by FIRESTORE_EMULATOR_HOST and compares, in one run:

* **baseline**: the handler's own single-document write, no dedup;
* **naive**: the pattern people copy (`bench.naive`): a `triggerEvents/<id>-<suffix>`
  read-then-write transaction, then Google's lease sample (a lease transaction on the local
  clock, and a `sent` flag);
* **lease / transaction / write_only**: this project's `dedup.Deduplicator` modes.

Per delivery kind (fresh, duplicate of a sent event, duplicate while a lease is held) it
counts Firestore RPCs with a gRPC client interceptor (`bench.rpc_count`) and times >= 500
deliveries; it runs a storm of concurrent copies (`bench.storm`) and measures the peak RSS of a
process handling 10,000 events (`bench.memory`). Results go to `bench/results.json`, a table
to stdout and a chart to `bench/results.png` (`bench.figures` derives the figures against the
bounds of `bench.targets`, `bench.report` prints them, `bench.charts` draws them). Missed targets
are reported, never fatal; a broken benchmark exits non-zero.
"""
