"""The instance's default Firebase Admin app, created once however many requests race for it.

`firebase_admin.initialize_app()` raises ValueError when the default app already exists, and
firebase-functions' own Firestore and callable parsers create it with an unguarded
check-then-create. On a cold instance serving several requests at once, two of them can both
see no app and one of them fails. Every caller in this project goes through `default_app()`
before anything that needs the app (firebase-functions' parsers included), so the app exists
before the first unguarded check runs.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import firebase_admin

_lock = threading.Lock()


def default_app() -> firebase_admin.App:
    """The default app, initialized with the instance's credentials on first call (no network
    call); thread-safe: concurrent first calls create it once and all return it."""
    import firebase_admin

    with _lock:
        try:
            return firebase_admin.get_app()
        except ValueError:
            return firebase_admin.initialize_app()
