"""Fixtures of the team data tests that use the real cluster."""

import uuid

import pytest

from cluster import client


@pytest.fixture
def storage_class(portal_cluster):
    """A StorageClass of this test with no volumes yet (Immediate binding, no provisioner); it and the volumes the
    test makes for it are deleted afterwards."""
    from kubernetes import client as k8s

    name = f"rsv-test-{uuid.uuid4().hex[:8]}"
    storage = k8s.StorageV1Api(client.api_client())
    storage.create_storage_class(
        {
            "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
    )
    yield name
    core = client.core()
    for volume in core.list_persistent_volume().items:
        if volume.spec.storage_class_name == name:
            core.delete_persistent_volume(volume.metadata.name)
    storage.delete_storage_class(name)
