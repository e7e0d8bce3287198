"""A deterministic simulator that attacks the real kernel (docs/simulation.md).

Every delivery runs the library's own code, through its public entrances (`Deduplicator.run`,
`AsyncDeduplicator.run`, `delivery.step`), over a simulated Firestore (`sim.server`) reached
through the kernel's narrow I/O protocol (`dedup.kernel.flow_io`). Time is virtual: a
scheduler (`sim.world`) decides from a seed how long each RPC takes, what fails, which
process dies or pauses, and so which delivery goes on at each await. After every run the
invariants of `sim.invariants` are checked, each naming the row of docs/guarantees.md (or
docs/steps.md) it stands for; a violation prints its seed, and `make simulate SEED=<n>`
replays it with its trace.

Layout: `values` (Firestore's value and size rules), `server` (documents, preconditions,
batches, transactions in both concurrency modes), `records` (the kernel's record operations
over the server, as `dedup.kernel.store.RecordStore` does over a client), `world` (virtual
time, tasks, RPC faults), `seams` (where the kernel reads clocks and randomness),
`scenario`/`handlers` (what a run delivers), `surfaces` (which surface a seed attacks),
`requests` (the HTTP and callable entrances), `operators` (release, revive, redrive),
`catalogue` (the user's values), `invariants`, `holes`/`old_kernel` (known holes, their fixes
taken back), `trace`, `shrink`, `batch`, `runner`, `__main__`.
"""
