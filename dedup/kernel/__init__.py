"""The kernel: what one delivery does, whatever brought it. The claim's decisions
(`claims`), every record write (`transitions`, `record`), the store over either Firestore client
(`store`, `marker`), the flows of the three modes (`lease`, `atomic`, `ambiguity`), durable steps
(`steps`, `step_writes`), one delivery's run (`run`) and the front doors that start it
(`front_door`, `defaults`). It knows no platform: entrances turn events and requests into its
calls. docs/architecture.md gives the reading order.
"""
