"""`fulfil_order` on each of the three deploy paths, with no cloud: a Firestore `created` trigger
on `orders/{orderId}`, in the database's location, retries on, under the runtime account, and
the variables its start-up check needs offered by `.env.example`.

The checks of every function (tests/deploy/test_deploy.py, test_dry_run.py, test_run_plan.py,
and the harness against a fake of Google's APIs) cover it too; these name it, so that it
cannot fall out of a plan unnoticed.
"""

from __future__ import annotations

import pytest

from dedup.cli.dotenv import parse
from tests.deploy.conftest import ROOT
from tests.deploy.test_deploy import (
    FIRESTORE_PREFIX,
    LOCATION,
    PROJECT,
    REGION,
    function_deploys,
    manifest_of,
    trigger_of,
)
from tests.deploy.test_run_plan import only, planned  # noqa: F401 (the plan fixture)

pytestmark = pytest.mark.subprocesses

NAME = "fulfil_order"
CREATED = FIRESTORE_PREFIX + "created"
ACCOUNT = f"exactly-once-fn@{PROJECT}.iam.gserviceaccount.com"


def test_firebase_deploy_gets_its_firestore_trigger_with_retries() -> None:
    """The manifest `make deploy-firebase` hands the Firebase CLI."""
    endpoint = manifest_of(ROOT)["endpoints"][NAME]
    assert trigger_of(endpoint) == (CREATED, "orders/{orderId}")
    assert endpoint["eventTrigger"]["retry"] is True
    assert endpoint["eventTrigger"]["region"] == LOCATION
    assert endpoint["region"] == [REGION]
    assert endpoint["serviceAccountEmail"] == ACCOUNT


def test_gcloud_functions_deploy_gets_the_same_trigger() -> None:
    """The `gcloud functions deploy` line `make -n deploy-gcloud` prints."""
    command = function_deploys(ROOT)[NAME]
    assert {
        "--gen2", "--retry", f"--region={REGION}", f"--entry-point={NAME}",
        f"--trigger-event-filters=type={CREATED}",
        "--trigger-event-filters-path-pattern=document=orders/{orderId}",
        f"--trigger-location={LOCATION}", f"--trigger-service-account={ACCOUNT}",
    } <= set(command)  # fmt: skip


def test_cloud_run_deploy_serves_it_behind_an_eventarc_trigger(planned: list[str]) -> None:  # noqa: F811
    """`make -n deploy-run`: its service, a Firestore trigger in the database's location (eur3
    in the plan's contract) sending protobuf, and its subscription's dead letters."""
    service = "fulfil-order"
    deploy = only(planned, f"gcloud run deploy {service} ")
    assert f"--function={NAME}" in deploy.split()
    assert "--no-allow-unauthenticated" in deploy.split()
    trigger = only(planned, f"if gcloud eventarc triggers describe {service} ")
    for part in (
        f"gcloud eventarc triggers create {service} ", "--location=eur3 ",
        f"--destination-run-service={service} ", f"--event-filters=type={CREATED} ",
        "'--event-filters-path-pattern=document=orders/{orderId}'",
        "--event-data-content-type=application/protobuf",
    ):  # fmt: skip
        assert part in trigger, part
    only(planned, f"gcloud pubsub subscriptions describe {service}-dead-letter ")


def test_env_example_offers_both_services() -> None:
    """A project copying `.env.example` gets PAYMENTS_URL and RECEIPTS_URL to fill in, which
    every path passes to every function (tests/deploy/test_real_deploy.py::test_variables)."""
    variables = parse((ROOT / ".env.example").read_text())[0]
    assert {"PAYMENTS_URL", "RECEIPTS_URL"} <= set(variables)
