"""Pure rendering and validation of team data: a job's volumes, shared memory and secret references in its pod
template; claims and Secrets; the spec rules for mount paths and shared memory. No database, no cluster."""

import base64
import json

import pytest
from django.core.exceptions import ValidationError

from cluster.manifests import JobManifestSpec, PoolTarget, render_job
from cluster.team_data import (
    SecretEnv,
    VolumeMount,
    claim_facts,
    render_claim,
    render_opaque_secret,
    render_registry_secret,
)
from jobs.specs import JobSpec, mount_path_problem, validate_spec

POOL = PoolTarget(slug="train", node_selector={"node-role": "training"})


def _job(**team_data) -> dict:
    spec = JobManifestSpec(
        name="rsv-1",
        namespace="team-a",
        job_id=1,
        team_slug="a",
        image="registry.example.com/a/train:1",
        gpus=1,
        cpu_millicores=1000,
        memory_mib=8192,
        home_pool=POOL,
        env={"EPOCHS": "3"},
        **team_data,
    )
    return render_job(spec)["spec"]["template"]["spec"]


def test_a_job_mounts_its_volumes_shared_memory_and_reads_secrets_by_reference():
    pod = _job(
        volumes=(VolumeMount("datasets", "/data"), VolumeMount("ckpt", "/workspace/ckpt", read_only=False)),
        shm_gib=2,
        image_pull_secrets=("registry-creds",),
        secret_env=(SecretEnv("HF_TOKEN", "hf", "token"),),
    )
    assert pod["volumes"] == [
        {"name": "vol-0", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "vol-1", "persistentVolumeClaim": {"claimName": "ckpt", "readOnly": False}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    container = pod["containers"][0]
    assert container["volumeMounts"] == [
        {"name": "vol-0", "mountPath": "/data", "readOnly": True},
        {"name": "vol-1", "mountPath": "/workspace/ckpt", "readOnly": False},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert container["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    ]


def test_a_job_without_team_data_renders_as_before():
    pod = _job()
    assert "volumes" not in pod and "imagePullSecrets" not in pod
    assert "volumeMounts" not in pod["containers"][0]


def test_claim_and_secrets_carry_the_portal_label_and_only_the_given_values():
    claim = render_claim(
        name="datasets", namespace="team-a", team_slug="a", size_gib=100, access_mode="ReadWriteMany", storage_class=""
    )
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}}
    assert claim["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reservoir"
    pull = render_registry_secret(
        name="creds", namespace="team-a", team_slug="a", registry="reg.example.com", username="bot", password="pw"
    )
    assert pull["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(pull["data"][".dockerconfigjson"]))
    assert config["auths"]["reg.example.com"]["auth"] == base64.b64encode(b"bot:pw").decode()
    opaque = render_opaque_secret(name="hf", namespace="team-a", team_slug="a", values={"token": "t0k"})
    assert opaque["type"] == "Opaque" and base64.b64decode(opaque["data"]["token"]) == b"t0k"


def test_claim_facts_read_phase_capacity_and_owner():
    facts = claim_facts(
        {
            "metadata": {"namespace": "team-a", "name": "d", "labels": {"app.kubernetes.io/managed-by": "reservoir"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-data"},
            "status": {"phase": "Bound", "capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteMany"]},
        }
    )
    assert (facts.phase, facts.capacity, facts.access_modes, facts.managed) == (
        "Bound",
        "200Gi",
        ("ReadWriteMany",),
        True,
    )
    assert claim_facts({"metadata": {"name": "x"}}).phase == "Pending"


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/data", True),
        ("/workspace/ckpt", True),
        ("/home/user/data", True),
        ("data", False),
        ("/", False),
        ("/etc", False),
        ("/etc/ssl", False),
        ("/dev/shm", False),
        ("/proc/x", False),
        ("/usr/local/data", False),
        ("/data/", False),
        ("/data/../etc", False),
        ("/data//x", False),
        ("/data:ro", False),
    ],
)
def test_mount_paths_are_absolute_plain_and_outside_system_paths(path, ok):
    assert (mount_path_problem(path) is None) is ok


def _spec(**fields) -> JobSpec:
    return JobSpec(name="t", image="registry.example.com/a/train:1", gpus=1, **fields)


def test_validate_spec_refuses_a_path_mounted_twice_and_bad_volume_entries():
    with pytest.raises(ValidationError) as error:
        validate_spec(_spec(volumes=[{"name": "a", "mount_path": "/data"}, {"name": "b", "mount_path": "/data"}]))
    assert "mounted twice" in str(error.value.message_dict["volumes"])
    with pytest.raises(ValidationError) as error:
        validate_spec(_spec(volumes=[{"name": "Not A Name", "mount_path": "/data"}]))
    assert "volumes" in error.value.message_dict


def test_shared_memory_must_leave_memory_for_the_processes():
    validate_spec(_spec(memory_mib=8192, shm_gib=7))
    with pytest.raises(ValidationError) as error:
        validate_spec(_spec(memory_mib=8192, shm_gib=8))
    assert "at most 7 GiB" in error.value.message_dict["shm_gib"][0]
    with pytest.raises(ValidationError):
        validate_spec(_spec(shm_gib=-1))


def test_secret_env_needs_a_secret_and_key_and_does_not_shadow_plain_env():
    validate_spec(_spec(secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}}, image_pull_secrets=["creds"]))
    for bad in (
        {"HF_TOKEN": {"secret": "hf"}},
        {"NVIDIA_VISIBLE_DEVICES": {"secret": "hf", "key": "token"}},
        {"1BAD": {"secret": "hf", "key": "token"}},
    ):
        with pytest.raises(ValidationError) as error:
            validate_spec(_spec(secret_env=bad))
        assert "secret_env" in error.value.message_dict
    with pytest.raises(ValidationError) as error:
        validate_spec(_spec(env={"HF_TOKEN": "x"}, secret_env={"HF_TOKEN": {"secret": "hf", "key": "token"}}))
    assert "both a plain variable" in error.value.message_dict["secret_env"][0]
    with pytest.raises(ValidationError) as error:
        validate_spec(_spec(image_pull_secrets=["creds", "creds"]))
    assert "image_pull_secrets" in error.value.message_dict
