"""A Python 3.14 venv deploys `python314` on all three paths, shown without a 3.14 interpreter:
each path asks the venv's `pyvenv.cfg` (`tools.runtime`), here a 3.14 one in a folder of its
own, for the runtime of firebase.json, of `gcloud functions deploy --runtime` and of `gcloud
run deploy --base-image`."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.conftest import ROOT
from tests.deploy.test_python_choice import fake_source
from tools.deploy.gcloud import gcloud_deploy_commands
from tools.deploy.manifest import deploy_manifest, endpoints, sdk_manifest
from tools.deploy.target import Target
from tools.deploy_run import deploy_command, service_names
from tools.runtime import runtime_of_venv, sync_firebase_json

MANIFEST = sdk_manifest(ROOT)


def target_in(source: Path) -> Target:
    return Target(
        project="demo-x", region="europe-west1", source=source, firestore_location="eur3",
        bucket_location="EU", project_number="123",
        secret_versions=(("LINE_CHANNEL_SECRET", "1"),),
    )  # fmt: skip


def test_a_314_venv_deploys_python314_on_every_path(tmp_path: Path) -> None:
    """firebase.json (as `firebase init` writes it today, `python314`) is kept and is what
    `firebase deploy` checks; every `gcloud functions deploy` has `--runtime=python314`; every
    `gcloud run deploy` has `--base-image=python314`."""
    source = fake_source(tmp_path, "3.14.0", "python314")
    assert sync_firebase_json(source) is None  # already the venv's
    assert runtime_of_venv(source) == "python314"
    target = target_in(source)
    manifest = deploy_manifest(MANIFEST, target, {}, for_deploy=False)
    gcloud = gcloud_deploy_commands(manifest, target)
    assert len(gcloud) == 12
    assert all("--runtime=python314" in command for command in gcloud)
    services = service_names(manifest)
    versions = {"LINE_CHANNEL_SECRET": "1"}
    run = [
        deploy_command(name, endpoint, services[name], target, versions)
        for name, endpoint in endpoints(manifest)
    ]
    assert all("--base-image=python314" in command for command in run)


def test_a_313_project_moves_to_python314_with_its_venv(tmp_path: Path) -> None:
    """A firebase.json of python313 under a 3.14 venv is rewritten by `make install`'s sync,
    and then every path agrees on python314."""
    source = fake_source(tmp_path, "3.14.1", "python313")
    assert "python313 -> python314" in str(sync_firebase_json(source))
    assert runtime_of_venv(source) == "python314"
    target = target_in(source)
    manifest = deploy_manifest(MANIFEST, target, {}, for_deploy=False)
    assert all("--runtime=python314" in c for c in gcloud_deploy_commands(manifest, target))
