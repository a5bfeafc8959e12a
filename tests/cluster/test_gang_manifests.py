"""Unit tests of the pure rendering of multi-node jobs: an Indexed Job, its headless Service, the rendezvous
environment and one pod per node; a one-node job is rendered as before."""

from cluster.facts import pod_facts
from cluster.labels import LABEL_JOB_ID
from cluster.manifests import COMPLETION_INDEX_ANNOTATION, render_gang_service, render_job
from tests.cluster.test_manifests import pod_spec, spec


def env_of(manifest) -> dict:
    """name -> value, or the fieldRef path for values taken from the pod."""
    entries = pod_spec(manifest)["containers"][0].get("env", [])
    return {e["name"]: e.get("value", e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")) for e in entries}


def test_a_three_node_job_is_an_indexed_job_of_three_pods_of_its_gpus_each():
    manifest = render_job(spec(nodes=3, gpus=8))
    job_spec = manifest["spec"]
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["parallelism"] == job_spec["completions"] == 3
    assert job_spec["suspend"] is True  # Kueue admits the whole pod set of 3 at once
    container = pod_spec(manifest)["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"  # per pod: 24 in all
    assert pod_spec(manifest)["subdomain"] == "rsv-42"


def test_the_rendezvous_environment_names_pod_zero_and_the_rank_comes_from_the_completion_index():
    env = env_of(render_job(spec(nodes=3, gpus=8)))
    assert env["MASTER_ADDR"] == "rsv-42-0.rsv-42.team-llm.svc"
    assert env["MASTER_PORT"] == "29500"
    assert env["NNODES"] == "3"
    assert env["NPROC_PER_NODE"] == "8"
    assert env["WORLD_SIZE"] == "24"
    assert env["NODE_RANK"] == f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
    assert env["PET_NODE_RANK"] == env["NODE_RANK"]
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] and env["PET_NNODES"] == "3"
    assert env["NCCL_DEBUG"] == "INFO"  # the user's own variables stay


def test_the_portal_rendezvous_values_win_over_a_users():
    env = env_of(render_job(spec(nodes=2, env={"MASTER_PORT": "1", "NODE_RANK": "7", "LR": "0.1"})))
    assert env["MASTER_PORT"] == "29500"
    assert env["NODE_RANK"].startswith("metadata.annotations")
    assert env["LR"] == "0.1"
    names = [e["name"] for e in pod_spec(render_job(spec(nodes=2, env={"MASTER_PORT": "1"})))["containers"][0]["env"]]
    assert len(names) == len(set(names))


def test_pods_of_one_gang_never_share_a_node_and_the_job_keeps_its_placement():
    manifest = render_job(spec(nodes=4, anti_affinity_group="sweep"))
    affinity = pod_spec(manifest)["affinity"]
    required = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == [
        {"labelSelector": {"matchLabels": {LABEL_JOB_ID: "42"}}, "topologyKey": "kubernetes.io/hostname"}
    ]
    # The job's pods carry the label the term selects.
    assert manifest["spec"]["template"]["metadata"]["labels"][LABEL_JOB_ID] == "42"
    # The anti-affinity group's preference and the pool's required node affinity are still there.
    assert affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_spill_after_keeps_one_pod_per_node_when_it_widens_a_gangs_placement():
    from cluster.manifests import scheduling_directives
    from tests.cluster.test_manifests import ELASTIC

    directives = scheduling_directives(spec(nodes=3, soft=True, spill_pools=(ELASTIC,)))
    required = directives["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required[0]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        len(
            directives["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
        )
        == 2
    )


def test_retries_are_the_jobs_backoff_limit():
    assert render_job(spec(nodes=3))["spec"]["backoffLimit"] == 0
    assert render_job(spec(nodes=3, backoff_limit=2))["spec"]["backoffLimit"] == 2


def test_a_one_node_job_is_rendered_as_before():
    manifest = render_job(spec())
    assert "completionMode" not in manifest["spec"] and "parallelism" not in manifest["spec"]
    assert "subdomain" not in pod_spec(manifest)
    assert "podAntiAffinity" not in pod_spec(manifest)["affinity"]
    assert "MASTER_ADDR" not in env_of(manifest)


def test_the_headless_service_selects_the_jobs_pods_and_is_owned_by_the_job():
    service = render_gang_service(spec(nodes=3), owner_uid="uid-1")
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == "rsv-42" and service["metadata"]["namespace"] == "team-llm"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {LABEL_JOB_ID: "42", "app.kubernetes.io/managed-by": "reservoir"}
    pod_labels = render_job(spec(nodes=3))["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[key] == value for key, value in service["spec"]["selector"].items())
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "rsv-42", "uid-1")
    assert "ownerReferences" not in render_gang_service(spec(nodes=3))["metadata"]


def test_the_sync_reads_a_pods_completion_index_and_restarts():
    pod = {
        "metadata": {
            "uid": "u",
            "name": "rsv-42-2-abcde",
            "namespace": "team-llm",
            "annotations": {COMPLETION_INDEX_ANNOTATION: "2"},
        },
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 1}, {"restartCount": 2}]},
    }
    facts = pod_facts(pod)
    assert facts.completion_index == 2
    assert facts.restarts == 3
    del pod["metadata"]["annotations"]
    assert pod_facts(pod).completion_index is None
