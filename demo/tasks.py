"""Cloud Tasks dispatches as HTTP requests, to deliver again and again like the platform does.

Cloud Tasks POSTs a task to its task-queue function with the body the Admin SDK enqueued
(`{"data": ...}`, JSON) and its own headers, of which the task name identifies the task:
every dispatch of one task carries the same name.
"""

from __future__ import annotations

import json
from typing import Any

from demo.events import HttpEvent


def task_dispatch(
    task_name: str,
    data: Any,
    *,
    queue: str = "indexPost",
    retry_count: int = 0,
    execution_count: int = 0,
) -> HttpEvent:
    """The request Cloud Tasks sends for task `task_name` of `queue` carrying `data`."""
    headers = {
        "Content-Type": "application/json",
        "X-CloudTasks-QueueName": queue,
        "X-CloudTasks-TaskName": task_name,
        "X-CloudTasks-TaskRetryCount": str(retry_count),
        "X-CloudTasks-TaskExecutionCount": str(execution_count),
    }
    body = json.dumps({"data": data}).encode()
    return HttpEvent(task_name, headers, body, description=f"task {task_name} of {queue}")
