"""The Cloud Tasks half of `relay_outbox`: create the task an `outbox/{id}` document asks for.

`dedup.outbox.enqueue_task` wrote the document inside a committed transaction; `relay_task`
creates the task through the Admin SDK (`firebase_admin.functions`, which reaches the Cloud
Tasks emulator when `CLOUD_TASKS_EMULATOR_HOST` is set) with the id `task_id_for(document)`,
then marks the document. A function named without a location is the one in the functions' own
region (`functions.region.task_function_resource`); on the Cloud Run path the task targets the
function's service's `run.app` URL (`functions.region.task_function_url`). How each answer is
treated:

| Cloud Tasks answer                              | relay                                  |
|-------------------------------------------------|----------------------------------------|
| created                                         | marked `enqueuedAt`, `taskId`; done    |
| the task already exists (409: an earlier relay) | marked the same way; done              |
| 400 (the request can never be valid)            | `TerminalError`: recorded failed       |
| anything else (404 queue missing, 5xx, network) | raised: lease released, event retried  |

Once the task exists, a document deleted before it is marked is logged and the relay ends
`sent` (a retry would only meet the existing task).

A document that is not a valid task (`function` or `taskData` malformed) is a terminal
failure, as a malformed message is.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from firebase_admin import exceptions, functions
from google.api_core.exceptions import NotFound
from google.cloud import firestore

from dedup import TerminalError
from dedup.outbox import FUNCTION_PATTERN, task_id_for
from dedup.platform import propagation
from dedup.platform.firebase_app import default_app
from functions.region import task_function_resource, task_function_url

EMULATOR_HOST_VARIABLE = "CLOUD_TASKS_EMULATOR_HOST"
"""Set (by `firebase emulators:exec`): the Admin SDK sends tasks to the Cloud Tasks emulator."""
logger = logging.getLogger(__name__)


def outbox_task(fields: dict[str, Any]) -> tuple[str, Any]:
    """(function name, task data) of a task outbox document; `TerminalError` when malformed."""
    function_name, text = fields.get("function"), fields.get("taskData")
    if not isinstance(function_name, str) or not FUNCTION_PATTERN.fullmatch(function_name):
        raise TerminalError(f"outbox document has no valid task function (got {function_name!r})")
    if not isinstance(text, str):
        raise TerminalError(f"outbox taskData must be JSON text, got {type(text).__name__}")
    try:
        return function_name, json.loads(text)
    except ValueError as exc:
        raise TerminalError(f"outbox taskData is not JSON: {exc}") from None


def create_task(function_name: str, data: Any, task_id: str) -> bool:
    """Create the task `task_id` carrying `{"data": data}`; True if created now, False if it
    already existed. Raises as the module's table says. A bare `function_name` is the
    functions' own region's (`functions.region`), not the Admin SDK's default us-central1."""
    queue = functions.task_queue(task_function_resource(function_name), app=default_app())
    # The task's dispatch continues the relay's trace (`task_once` reads these headers).
    options = functions.TaskOptions(
        task_id=task_id,
        headers=propagation.headers() or None,
        uri=task_function_url(function_name),  # the run.app URL on the Cloud Run path
    )
    try:
        queue.enqueue({"data": data}, options)
    except (exceptions.AlreadyExistsError, exceptions.ConflictError):
        # Production answers ALREADY_EXISTS, the emulator a bare 409: both mean the name is
        # taken, by an earlier relay of this same document (the id is derived from it).
        return False
    except exceptions.InvalidArgumentError as exc:
        raise TerminalError(f"Cloud Tasks refused the task for {function_name}: {exc}") from exc
    except ValueError:
        if not os.environ.get(EMULATOR_HOST_VARIABLE):
            raise
        # firebase-admin (7.x) misreads the Cloud Tasks emulator's answer to a task created
        # with an id (it drops the first character of the returned name) and raises
        # ValueError after the task was created. Asking again tells: the name is taken.
        try:
            queue.enqueue({"data": data}, options)
        except (exceptions.AlreadyExistsError, exceptions.ConflictError):
            return True
        raise
    return True


def relay_task(snapshot: firestore.DocumentSnapshot, client: firestore.Client) -> None:
    """Create the Cloud Task that the outbox document `snapshot` holds, then mark it.

    A document deleted before it is marked is logged (WARNING) and the relay still succeeds:
    the task exists, as `relay_outbox.mark_published` does for a message.
    """
    function_name, data = outbox_task(snapshot.to_dict() or {})
    task_id = task_id_for(snapshot.reference.path)
    create_task(function_name, data, task_id)
    try:
        client.document(snapshot.reference.path).update(
            {"enqueuedAt": firestore.SERVER_TIMESTAMP, "taskId": task_id}
        )
    except NotFound:
        logger.warning(
            "%s was deleted before it was marked: its task %s exists",
            snapshot.reference.path,
            task_id,
        )
