"""Pod security in a team namespace, on the real apiserver: Pod Security Admission refuses what the baseline
profile forbids, even for work submitted around the portal; the portal's own pods pass it, without a
service-account token and with the runtime's default seccomp profile."""

import pytest
from kubernetes.client.exceptions import ApiException

from cluster import client
from jobs import services
from jobs.choices import JobState
from jobs.specs import JobSpec
from pools.models import Pool
from tests.clusterkit import KWOK_DELAY, job_state, set_quota, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def pod(name: str, **container_extra) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example.com/tools/shell:1", **container_extra}],
        },
    }


def test_the_baseline_profile_is_enforced_in_team_namespaces(cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    core = client.core()
    labels = core.read_namespace(cluster_team.namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(cluster_team.namespace, pod("privileged", securityContext={"privileged": True}))
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body and "privileged" in refused.value.body

    host_path = pod("host-path", volumeMounts=[{"name": "root", "mountPath": "/host"}])
    host_path["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(cluster_team.namespace, host_path)
    assert refused.value.status == 403 and "hostPath" in refused.value.body


def test_the_portals_pods_pass_baseline_without_a_token_and_with_runtime_default_seccomp(cluster_sync, cluster_team):
    set_quota(cluster_team, Pool.objects.get(slug="reserved-a800"), 8)
    job = services.submit_job(
        team=cluster_team,
        pool=Pool.objects.get(slug="reserved-a800"),
        user=cluster_team.researcher,
        spec=JobSpec(
            name="secure",
            image="registry.example.com/research/train:1.0",
            gpus=1,
            pod_annotations={KWOK_DELAY: "10m"},
        ),
    )
    wait_for(lambda: job_state(job.pk) == JobState.RUNNING, what=f"job #{job.pk} running")
    pods = client.core().list_namespaced_pod(cluster_team.namespace, label_selector=f"reservoir.io/job-id={job.pk}")
    (created,) = pods.items
    assert created.spec.automount_service_account_token is False
    assert not [v for v in created.spec.volumes or [] if v.name.startswith("kube-api-access")]
    assert created.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert created.spec.containers[0].security_context.allow_privilege_escalation is False
