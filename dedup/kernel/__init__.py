"""The kernel: what one delivery does, whatever brought it. The record's schema (`record`), the
claim's decisions (`claims`), every record write (`transitions`), what fits in a record as
Firestore measures it (`room`), the store over either Firestore client (`store`), what
Firestore's errors mean (`store_errors`) and an instance's per-key turns (`turns`), what a
handler gets and the blocking driver (`delivery`), the protocols the flows see (`flow_io`), one
delivery's time (`budget`) and its run (`run`), the flows of the three modes (`lease`, `atomic`,
`ambiguity`; a lease given back unstarted, `give_back`), durable steps (`steps`,
`step_writes`), the front door that starts a delivery (`front_door`) and the check of a
handler's signature (`handler_shape`). It knows no platform: entrances turn events and requests
into its calls. docs/architecture.md gives the reading order.
"""
