"""A local fake of the Google APIs `gcloud` and `firebase deploy` call, for the deploy harness.

One threaded HTTP server on 127.0.0.1 answers every API the two deploy paths touch (Cloud
Functions v2 with its upload URL and the upload itself, Cloud Run, Eventarc, Pub/Sub, Cloud
Tasks, IAM, Secret Manager, Firestore admin, Resource Manager, Service Usage, Artifact
Registry, billing, rules, the OAuth token endpoint), as a generic resource store:

* `POST collection?xxxId=ID` (or a body naming the resource) creates, `PATCH name` merges,
  `GET name` reads (404 when absent, as the real APIs say), `DELETE name` removes; every
  mutation answers with a finished long-running operation whose `response` is the resource.
* `:getIamPolicy`, `:setIamPolicy`, `:testIamPermissions`, `:generateUploadUrl` and a few
  read-only facts (enabled services, billing, the project and its number, the Firestore
  database's location) have fixed answers; Cloud Build's default service account is
  `build_account` (the compute account, or the legacy Cloud Build one).
* A new Eventarc trigger gets, as Eventarc gives it, a Pub/Sub transport: the topic it was given,
  or one of its own, and a push subscription stored under `transport.pubsub.subscription`;
  an update keeps that transport (gcloud sends an empty one). A Pub/Sub `PATCH` merges the
  `subscription` (or `topic`) of its body.

It records every request (`requests`) and every uploaded archive (`uploads`). A request it
does not know is answered 400 (never retried) with a message naming it, and kept in `unknown`,
so a test fails clearly when a tool starts calling something new. Nothing here talks to Google.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

PROJECT_NUMBER = "123456789012"
FIRESTORE_LOCATION = "nam5"
"""What the fake says of the project's Firestore database."""
BUCKET_LOCATION = "EU"
"""What the fake says of every Cloud Storage bucket's location (a multi-region)."""
DIRECT = {
    "topics",
    "queues",
    "secrets",
    "versions",
    "rulesets",
    "releases",
    "serviceAccounts",
    "subscriptions",
    "jobs",
}
"""Collections whose create/update answers with the resource itself, not an operation."""
BUILD_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.Build"
COMPUTE_BUILD_ACCOUNT = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
LEGACY_BUILD_ACCOUNT = f"{PROJECT_NUMBER}@cloudbuild.gserviceaccount.com"
"""The two accounts Cloud Build says it builds with: a newer project's (the Compute Engine
default account) and an older one's (the legacy Cloud Build account)."""


@dataclass
class Request:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    """The JSON body, else the raw bytes (b"" when empty)."""


@dataclass
class FakeGoogle:
    """The fake's state: what it was asked and what it stores (see the module docstring)."""

    requests: list[Request] = field(default_factory=list)
    uploads: list[bytes] = field(default_factory=list)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    build_account: str = COMPUTE_BUILD_ACCOUNT
    """What Cloud Build's `defaultServiceAccount` names (`LEGACY_BUILD_ACCOUNT` for an older
    project)."""

    @property
    def url(self) -> str:
        """The fake's origin, http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    def calls(self, method: str, fragment: str) -> list[Request]:
        """The recorded requests of `method` whose path contains `fragment`."""
        return [r for r in self.requests if r.method == method and fragment in r.path]

    def named(self, suffix: str) -> dict[str, dict[str, Any]]:
        """Stored resources whose name ends with `suffix`-like collection (e.g. "/functions")."""
        return {k: v for k, v in self.resources.items() if k.rsplit("/", 1)[0].endswith(suffix)}

    def add_secret(self, project: str, secret: str, version: int) -> None:
        """A Secret Manager secret whose latest (enabled) version is `version`."""
        name = f"projects/{project}/secrets/{secret}"
        self.resources[name] = {"name": name, "replication": {"automatic": {}}}
        latest = {"name": f"{name}/versions/{version}", "state": "ENABLED"}
        self.resources[f"{name}/versions/latest"] = latest
        self.resources[latest["name"]] = latest

    # --- answers ------------------------------------------------------------------------------

    def answer(self, method: str, raw_path: str, query: dict[str, list[str]], body: Any) -> tuple:
        """(status, JSON-able body) for one request."""
        path = unquote(raw_path)
        for prefix in ("/v1beta1/", "/v1alpha/", "/v1beta/", "/v1/", "/v2/", "/v3/", "/v2beta/"):
            if path.startswith(prefix):
                name = path[len(prefix) :]
                break
        else:
            name = path.lstrip("/")
        resource, _, verb = name.partition(":")
        if path in ("/oauth2/v3/token", "/oauth2/v4/token", "/token"):
            return 200, {"access_token": "fake-token", "expires_in": 3600, "token_type": "Bearer"}
        if method == "PUT" and path.startswith("/upload/"):
            with self.lock:
                self.uploads.append(body if isinstance(body, bytes) else json.dumps(body).encode())
            return 200, {}
        if method == "POST" and path.startswith("/upload/storage/v1/b/"):  # gcloud run --source
            return self.storage_upload(path, query, body)
        if verb == "generateUploadUrl":
            with self.lock:
                n = len(self.uploads) + len(self.calls("POST", ":generateUploadUrl"))
            return 200, {
                "uploadUrl": f"{self.url}/upload/{n}",
                "storageSource": {"bucket": "fake-bucket", "object": f"source-{n}.zip"},
            }
        if verb == "getIamPolicy":
            return 200, self.resources.get(resource + ":iam", {"bindings": [], "etag": "BwY="})
        if verb == "setIamPolicy":
            policy = dict((body or {}).get("policy") or {})
            policy.setdefault("etag", "BwY=")
            self.resources[resource + ":iam"] = policy
            return 200, policy
        if verb == "testIamPermissions":
            return 200, {"permissions": (body or {}).get("permissions", [])}
        if verb == "generateServiceIdentity":
            agent = resource.split("/")[-1].split(".")[0]
            email = f"service-{PROJECT_NUMBER}@gcp-sa-{agent}.iam.gserviceaccount.com"
            return 200, self.operation(resource, {"email": email})
        if verb == "submit" and resource.endswith("/builds"):  # Cloud Run's source build
            return self.submit_build(resource.removesuffix("/builds"), body or {})
        if verb in ("batchEnable", "enable"):
            return 200, self.operation(resource, {})
        if method == "GET":
            return self.get(resource, path, query)
        if method == "DELETE":
            self.resources.pop(resource, None)
            return 200, self.operation(resource, {})
        if method in ("POST", "PATCH", "PUT") and not verb:
            return self.write(method, resource, path, query, body)
        if method == "POST" and verb in ("test", "publish"):  # rules compile, Pub/Sub
            return 200, {}
        return self.refuse(method, raw_path)

    def trigger_transport(self, name: str, trigger: dict[str, Any]) -> dict[str, Any]:
        """What Eventarc makes for a new trigger: its Pub/Sub transport, the topic it was given
        (`--transport-topic`) or one of its own, and a push subscription on it to the
        destination, stored so that `gcloud pubsub subscriptions` commands find it."""
        project, location, trigger_id = name.split("/")[1], name.split("/")[3], name.split("/")[-1]
        given = (trigger.get("transport") or {}).get("pubsub", {}).get("topic")
        topic = given or f"projects/{project}/topics/eventarc-{location}-{trigger_id}-001"
        subscription = f"projects/{project}/subscriptions/eventarc-{location}-{trigger_id}-sub-001"
        with self.lock:
            self.resources.setdefault(topic, {"name": topic})
            self.resources[subscription] = {
                "name": subscription, "topic": topic, "ackDeadlineSeconds": 10,
                "pushConfig": {"pushEndpoint": f"https://{trigger_id}.fake.run.app"},
            }  # fmt: skip
        return {"pubsub": {"topic": topic, "subscription": subscription}}

    def knative_write(self, method: str, resource: str, body: dict[str, Any]) -> tuple:
        """Create (POST to `.../services`) or replace (PUT) a Cloud Run service, stored ready:
        its generation observed, its revision ready, its run.app URL set."""
        meta = dict(body.get("metadata") or {})
        name = f"{resource}/{meta['name']}" if method == "POST" else resource
        meta["generation"] = int(self.resources.get(name, {}).get("metadata", {})
                                 .get("generation", 0)) + 1  # fmt: skip
        service = meta["name"]
        ready = {"type": "Ready", "status": "True"}
        status = {
            "observedGeneration": meta["generation"],
            "conditions": [ready, {**ready, "type": "ConfigurationsReady"},
                           {**ready, "type": "RoutesReady"}],
            "latestReadyRevisionName": f"{service}-00001", "latestCreatedRevisionName":
            f"{service}-00001", "url": f"https://{service}-{PROJECT_NUMBER}.fake.run.app",
            "address": {"url": f"https://{service}-{PROJECT_NUMBER}.fake.run.app"},
            "traffic": [{"revisionName": f"{service}-00001", "percent": 100,
                         "latestRevision": True}],
        }  # fmt: skip
        stored = {**body, "metadata": meta, "status": status}
        with self.lock:
            self.resources[name] = stored
        return 200, stored

    def submit_build(self, location: str, body: dict[str, Any]) -> tuple:
        """Cloud Run's `builds:submit` (`gcloud run deploy --source`): a build that has already
        succeeded, its Cloud Build operation stored finished with the image it built."""
        with self.lock:
            number = len(self.calls("POST", ":submit"))
        project = location.split("/")[1]
        build_id = f"build-{number}"
        build = {
            "id": build_id, "projectId": project, "status": "SUCCESS",
            "name": f"{location}/builds/{build_id}", "logUrl": f"{self.url}/logs/{build_id}",
            "results": {"images": [{"name": body.get("imageUri", "image"),
                                    "digest": "sha256:" + "0" * 64}]},
        }  # fmt: skip
        name = f"{location}/operations/{build_id}"
        operation: dict[str, Any] = {"name": name, "done": True,
                     "metadata": {"@type": "type.googleapis.com/"
                                  "google.devtools.cloudbuild.v1.BuildOperationMetadata",
                                  "build": build},
                     "response": {"@type": BUILD_TYPE, **build}}  # fmt: skip
        with self.lock:
            self.resources[name] = operation
        return 200, {"buildOperation": operation, "baseImageUri": body.get("buildpackBuild", {})
                     .get("baseImage", "")}  # fmt: skip

    def storage_upload(self, path: str, query: dict[str, list[str]], body: Any) -> tuple:
        """A Cloud Storage object upload (multipart: metadata, then the file): the file is kept
        in `uploads`, the answer is the object with its size (which gcloud checks)."""
        raw = body if isinstance(body, bytes) else b""
        data = raw
        if raw.startswith(b"--"):
            boundary = raw.split(b"\n", 1)[0].strip()
            part = raw.split(boundary)[2]  # [preamble, metadata, file, closing]
            data = part.split(b"\n\n", 1)[1].removesuffix(b"\n")
        with self.lock:
            self.uploads.append(data)
        bucket = path.split("/")[5]
        name = (query.get("name") or ["object"])[0]
        return 200, {"kind": "storage#object", "bucket": bucket, "name": name,
                     "size": str(len(data)), "generation": "1"}  # fmt: skip

    def refuse(self, method: str, path: str) -> tuple:
        """Record an unknown request and answer so that the caller fails clearly."""
        self.unknown.append(f"{method} {path}")
        message = f"fake_google: no answer for {method} {path}"
        return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}

    def operation(self, name: str, response: dict[str, Any]) -> dict[str, Any]:
        """A finished long-running operation. Eventarc names its operations by location, so a
        trigger's is stored under its own name, and polling it answers that trigger."""
        if "/collectionGroups/" in name:  # Firestore admin names its operations by database
            operation_name = (
                f"{name.split('/collectionGroups/')[0]}/operations/op-{len(self.resources)}"
            )
            operation = {"name": operation_name, "done": True, "response": response,
                         "metadata": {}}  # fmt: skip
            with self.lock:
                self.resources[operation_name] = operation
            return operation
        if "/triggers/" in name:
            where, trigger_id = name.split("/triggers/")
            operation_name = f"{where}/operations/op-{trigger_id}"
            operation = {"name": operation_name, "done": True, "response": response,
                         "metadata": {}}  # fmt: skip
            with self.lock:
                self.resources[operation_name] = operation
            return operation
        return {"name": f"{name}/operations/op-1", "done": True, "response": response,
                "metadata": {}}  # fmt: skip

    def get(self, resource: str, path: str, query: dict[str, list[str]]) -> tuple:
        """Read a stored resource, a fixed fact, or a list; else 404 as the APIs say."""
        if "/operations/" in resource and resource in self.resources:
            return 200, self.resources[resource]
        if "/operations/" in resource:
            owner = resource.split("/operations/")[0]
            return 200, self.operation(owner, self.resources.get(owner, {}))
        if resource in self.resources:
            return 200, self.resources[resource]
        parts = resource.split("/")
        if parts[0] == "apis":  # Cloud Run's Knative API: a missing resource is a 404
            return 404, {"error": {"code": 404, "message": f"{resource} not found",
                                   "status": "NOT_FOUND"}}  # fmt: skip
        if len(parts) == 4 and parts[2] == "services":  # Service Usage: every API is on
            return 200, {"name": resource, "state": "ENABLED", "config": {"name": parts[-1]}}
        if resource.endswith("/runtimes"):
            runtimes = [
                {
                    "name": f"python3{minor}",
                    "displayName": f"Python 3.{minor}",
                    "stage": "GA",
                    "environment": "GEN_2",
                }
                for minor in (12, 13, 14)
            ]
            return 200, {"runtimes": runtimes}
        if resource.endswith("/defaultServiceAccount"):  # Cloud Build's
            email = f"projects/-/serviceAccounts/{self.build_account}"
            return 200, {"name": resource, "serviceAccountEmail": email}
        if resource.endswith("/billingInfo"):
            return 200, {"name": resource, "billingEnabled": True}
        if len(parts) == 2 and parts[0] == "projects":
            return 200, {"projectId": parts[1], "projectNumber": PROJECT_NUMBER, "name": resource,
                         "lifecycleState": "ACTIVE", "state": "ACTIVE"}  # fmt: skip
        if parts == ["storage", "v1", "b"]:  # the project's buckets: every one asked of exists
            names = query.get("prefix") or []
            return 200, {"kind": "storage#buckets", "items": [
                {"kind": "storage#bucket", "name": n, "id": n, "location": BUCKET_LOCATION,
                 "projectNumber": PROJECT_NUMBER} for n in names]}  # fmt: skip
        if len(parts) == 4 and parts[:3] == ["storage", "v1", "b"]:  # a bucket (JSON API)
            return 200, {"kind": "storage#bucket", "name": parts[3], "id": parts[3],
                         "location": BUCKET_LOCATION, "locationType": "multi-region",
                         "projectNumber": PROJECT_NUMBER}  # fmt: skip
        if (
            len(parts) == 5
            and parts[:3] == ["storage", "v1", "projects"]
            and parts[4] == ("serviceAccount")
        ):  # the Cloud Storage service agent
            email = f"service-{PROJECT_NUMBER}@gs-project-accounts.iam.gserviceaccount.com"
            return 200, {"kind": "storage#serviceAccount", "email_address": email}
        if len(parts) == 4 and parts[2] == "databases":
            return 200, {"name": resource, "locationId": FIRESTORE_LOCATION,
                         "type": "FIRESTORE_NATIVE"}  # fmt: skip
        if len(parts) % 2 == 1:  # a collection: list what is stored under it
            key = parts[-1]
            items = [v for k, v in self.resources.items() if k.rsplit("/", 1)[0] == resource]
            return 200, {key: items}
        return 404, {"error": {"code": 404, "message": f"{resource} not found",
                               "status": "NOT_FOUND"}}  # fmt: skip

    def write(self, method: str, resource: str, path: str, query: dict, body: Any) -> tuple:
        """Create (POST to a collection) or update (PATCH, or POST to a name) a resource."""
        body = body if isinstance(body, dict) else {}
        parts = resource.split("/")
        if method == "POST" and resource.endswith("/tasks"):  # Cloud Tasks: create a task
            task = dict(body.get("task") or {})
            name = task.get("name") or f"{resource}/fake-{len(self.resources)}"
            with self.lock:
                self.resources[name] = {**task, "name": name}
            return 200, {**task, "name": name, "task": {"name": "/" + name}}  # both answers' forms
        if (
            method == "POST"
            and resource.endswith("/indexes")
            and any(
                k.rsplit("/", 1)[0] == resource and v.get("fields") == body.get("fields")
                for k, v in self.resources.items()
            )
        ):  # Firestore's answer to a composite index it has already
            return 409, {"error": {"code": 409, "message": "Index already exists.",
                                   "status": "ALREADY_EXISTS"}}  # fmt: skip
        if parts[0] == "apis":  # Cloud Run's Knative API (`gcloud run`)
            return self.knative_write(method, resource, body)
        if method == "PUT":
            name, stored = resource, {**body, "name": resource}
        elif method == "POST" and len(parts) % 2 == 1:
            ids = [v[0] for k, v in query.items() if k.endswith("Id") and k != "requestId"]
            name = body.get("name") or (f"{resource}/{ids[0]}" if ids else "")
            if not name:  # the API names it
                name = f"{resource}/fake-{len(self.resources)}"
            name = name if name.startswith("projects/") else f"{resource}/{name.split('/')[-1]}"
            stored = {**body, "name": name}
        else:
            name = resource
            stored = {**self.resources.get(name, {}), **body, "name": name}
        if method == "PATCH" and parts[-2] in ("subscriptions", "topics"):  # Pub/Sub's update
            kind = parts[-2].removesuffix("s")
            stored = {**self.resources.get(name, {}), **body.get(kind, {}), "name": name}
        if "/triggers/" in name and method == "POST":
            stored["transport"] = self.trigger_transport(name, stored)
        elif "/triggers/" in name:  # an update: the transport is Eventarc's, kept as it is
            stored["transport"] = self.resources.get(name, {}).get("transport", {})
        if "/functions/" in name:
            stored.setdefault("state", "ACTIVE")
            service = stored.setdefault("serviceConfig", {})
            service.setdefault("uri", f"https://{name.split('/')[-1].lower()}.fake.run.app")
            where, function = name.split("/functions/")
            service.setdefault("service", f"{where}/services/{function.lower().replace('_', '-')}")
        with self.lock:
            self.resources[name] = stored
        if name.split("/")[-2] in DIRECT:
            return 200, stored  # these APIs answer with the resource, not an operation
        return 200, self.operation(name, stored)


def _handler(fake: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _serve(self) -> None:
            split = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not length and self.headers.get("Transfer-Encoding") == "chunked":
                raw = self._chunked()
            body: Any = raw
            if raw and "json" in (self.headers.get("Content-Type") or ""):
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
            query = parse_qs(split.query)
            with fake.lock:
                fake.requests.append(Request(self.command, unquote(split.path), query, body))
            status, answer = fake.answer(self.command, split.path, query, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _chunked(self) -> bytes:
            out = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 (http.server's names)

    return Handler


class RunningFake:
    """A `FakeGoogle` served on 127.0.0.1 in a background thread (a context manager)."""

    def __init__(self) -> None:
        self.fake = FakeGoogle()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.fake))
        self.server.daemon_threads = True
        self.fake.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGoogle:
        self.thread.start()
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
