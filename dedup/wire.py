"""The record writes on the wire: protobuf `Write` messages built directly, committed straight
on the client's gRPC channel.

A record write through the client library (`DocumentReference.create`, `.update`,
`WriteBatch.commit`) spends most of an instance's CPU outside the network call: every field
goes through proto-plus marshalling twice (building the write, then the request), and the
generated client wraps the call again. A dedup record is flat (strings, numbers, booleans,
timestamps, nulls and server timestamps), so its `Write` can be built as the plain protobuf
message the library would end up sending, and committed with one gRPC call: about half the
client CPU of a record write, measured by `make bench` (`cpu_us_per_delivery_<mode>`).

What goes on the wire is what the library sends for the same fields: the same document,
mask, precondition and server-timestamp transforms (`tests/dedup/test_wire.py` compares them
message for message), except that an update's guard keeps the nanoseconds of its update time,
which the library's wrapper drops. Any value or field name outside that flat shape (a map, a
list, a dotted name) is built by the library itself. Errors are the library's too: a failed
call raises the `google.api_core` exception the generated client would raise
(`from_grpc_error`), so the stores' retry and conflict rules are unchanged. The sync record
store (`dedup.store`) and its transactions (`dedup.rpc.BoundedTransaction`: begin and commit)
take this path; the async store keeps the library's calls. It reaches into the client
(`_firestore_api`, `_rpc_metadata`) and the library's `_helpers` of the google-cloud-firestore
version pinned in requirements.txt: an upgrade that changes them fails `test_wire.py` and the
emulator suite, not production.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import grpc
from google.api_core import exceptions as api_exceptions
from google.api_core import gapic_v1
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.cloud._helpers import _datetime_to_pb_timestamp
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.types import common, document
from google.cloud.firestore_v1.types import firestore as requests
from google.cloud.firestore_v1.types import write as writes

Write: Any = writes.Write.pb()
"""The `google.firestore.v1.Write` protobuf message class (no proto-plus wrapper)."""

_CommitRequest: Any = requests.CommitRequest.pb()
_CommitResponse: Any = requests.CommitResponse.pb()
_BeginRequest: Any = requests.BeginTransactionRequest.pb()
_BeginResponse: Any = requests.BeginTransactionResponse.pb()
_Document: Any = document.Document.pb()
_Value: Any = document.Value.pb()
_Mask: Any = common.DocumentMask.pb()
_Precondition: Any = common.Precondition.pb()
_Transform: Any = writes.DocumentTransform.FieldTransform.pb()
_REQUEST_TIME = int(writes.DocumentTransform.FieldTransform.ServerValue.REQUEST_TIME)
_pb_timestamp: Any = _datetime_to_pb_timestamp  # the library's own conversions and mapping
_nanos_timestamp: Any = DatetimeWithNanoseconds.timestamp_pb
_from_timestamp: Any = DatetimeWithNanoseconds.from_timestamp_pb
_routing_header: Any = gapic_v1.routing_header.to_grpc_metadata
_api_error: Any = api_exceptions.from_grpc_error
_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")


def _value(value: object) -> Any:
    """The protobuf `Value` of a flat field value; None when the library must encode it."""
    if value is None:
        return _Value(null_value=0)
    kind = type(value)
    if kind is bool:
        return _Value(boolean_value=value)
    if kind is int:
        return _Value(integer_value=value)
    if kind is float:
        return _Value(double_value=value)
    if kind is str:
        return _Value(string_value=value)
    if kind is DatetimeWithNanoseconds:
        return _Value(timestamp_value=_nanos_timestamp(value))
    if kind is datetime:
        return _Value(timestamp_value=_pb_timestamp(value))
    return None


def _split(fields: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """(encoded values, server-timestamp field names) of flat `fields`; None otherwise."""
    values: dict[str, Any] = {}
    stamped: list[str] = []
    for name, value in fields.items():
        if _SIMPLE_NAME.match(name) is None:
            return None
        if value is firestore.SERVER_TIMESTAMP:
            stamped.append(name)
            continue
        encoded = _value(value)
        if encoded is None:
            return None
        values[name] = encoded
    return values, stamped


def _transforms(names: Iterable[str]) -> list[Any]:
    return [_Transform(field_path=name, set_to_server_value=_REQUEST_TIME) for name in names]


def _timestamp(moment: datetime) -> Any:
    if isinstance(moment, DatetimeWithNanoseconds):
        return _nanos_timestamp(moment)
    return _pb_timestamp(moment)


def create_write(path: str, fields: Mapping[str, Any]) -> Any:
    """The `Write` of `DocumentReference.create(fields)` on the document `path` (its full
    name, `projects/.../documents/<collection>/<id>`): the document, exists=false, and a
    server timestamp for each `SERVER_TIMESTAMP` field."""
    split = _split(fields)
    if split is None:
        return _helpers.pbs_for_create(path, dict(fields))[0]._pb
    values, stamped = split
    return Write(
        update=_Document(name=path, fields=values),
        current_document=_Precondition(exists=False),
        update_transforms=_transforms(stamped),
    )


def update_write(path: str, fields: Mapping[str, Any], update_time: datetime | None) -> Any:
    """The `Write` of `DocumentReference.update(fields)` on the document `path`, guarded by
    its last update time (`Client.write_option(last_update_time=...)`, nanoseconds kept,
    which the library's wrapper drops), or by its existence when `update_time` is None."""
    precondition = (
        _Precondition(exists=True)
        if update_time is None
        else _Precondition(update_time=_timestamp(update_time))
    )
    split = _split(fields)
    if split is None:
        write = _helpers.pbs_for_update(path, dict(fields), None)[0]._pb
        write.current_document.CopyFrom(precondition)
        return write
    values, stamped = split
    return Write(
        update=_Document(name=path, fields=values),
        update_mask=_Mask(field_paths=sorted(values)),
        current_document=precondition,
        update_transforms=_transforms(sorted(stamped)),
    )


class Committer:
    """Commits `Write` messages (and begins transactions) on one sync client's gRPC channel,
    as `Firestore.Commit` and `Firestore.BeginTransaction` with the client's own metadata
    (database routing, and the emulator's credentials). Safe to share between threads."""

    def __init__(self, client: firestore.Client) -> None:
        """A committer for `client`; its channel is the client's, opened on first use."""
        self._client = client
        self._calls: dict[str, Any] = {}
        self._metadata: tuple[tuple[str, str], ...] = ()

    def _call(self, method: str, request: Any, response: Any, timeout: float) -> Any:
        call = self._calls.get(method)
        if call is None:
            client = self._client
            self._metadata = (
                *client._rpc_metadata,
                _routing_header((("database", client._database_string),)),
            )
            call = self._calls[method] = client._firestore_api._transport.grpc_channel.unary_unary(
                f"/google.firestore.v1.Firestore/{method}",
                request_serializer=type(request).SerializeToString,
                response_deserializer=response.FromString,
            )
        try:
            return call(request, metadata=self._metadata, timeout=timeout)
        except grpc.RpcError as exc:
            raise _api_error(exc) from exc

    def commit(self, write_pbs: list[Any], *, timeout: float, transaction: bytes = b"") -> Any:
        """Commit `write_pbs` atomically (in `transaction` if given), once, with no retry; the
        `CommitResponse` message. Raises the `google.api_core.exceptions` error of a failed
        call. `write_pbs` may mix plain messages and the library's wrapped ones."""
        request = _CommitRequest(
            database=self._client._database_string,
            writes=[getattr(write, "_pb", write) for write in write_pbs],
            transaction=transaction,
        )
        return self._call("Commit", request, _CommitResponse, timeout)

    def begin(self, options: Any, *, timeout: float) -> bytes:
        """Begin a transaction with `options` (a `TransactionOptions`, the library's or a
        message, or None); its id. Raises like `commit`; not retried here."""
        request = _BeginRequest(database=self._client._database_string)
        if options is not None:
            request.options.CopyFrom(getattr(options, "_pb", options))
        response = self._call("BeginTransaction", request, _BeginResponse, timeout)
        transaction: bytes = response.transaction
        return transaction


def first_update_time(response: Any) -> datetime:
    """The first write's update time in a `CommitResponse` message (a fencing token)."""
    moment: datetime = _from_timestamp(response.write_results[0].update_time)
    return moment
