"""The instance's default Firebase Admin app, created once however many requests race for it.

`firebase_admin.initialize_app()` raises ValueError when the default app already exists, and
firebase-functions' own Firestore event parser (like its auth-blocking token check) creates it
with an unguarded check-then-create. On a cold instance serving several requests at once, two
of them can both see no app and one of them fails. Every user of the app in this project calls
`default_app()` first (the event boundary before that parser runs, the ID-token check, FCM, the
task relay), so the app exists before an unguarded check can run
(`tests/functions/test_cold_instance_race.py`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import firebase_admin

_lock = threading.Lock()


def default_app() -> firebase_admin.App:
    """The default app, initialized with the instance's credentials on first call (no network
    call); thread-safe: concurrent first calls create it once and all return it. Once it
    exists, a call takes no lock of this module (the event boundary calls it per event)."""
    import firebase_admin

    try:
        return firebase_admin.get_app()
    except ValueError:
        pass
    with _lock:
        try:
            return firebase_admin.get_app()
        except ValueError:
            return firebase_admin.initialize_app()
