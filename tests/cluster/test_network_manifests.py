"""Unit tests of the pure rendering of a team namespace's network isolation and storage caps: which pods each
NetworkPolicy selects and whom it lets in (evaluated with tests/netpolicy.py, the same reference the cluster test
uses against real pods), egress closed only when the platform says so, a gang's per-job token, and the quota keys
that cap claims made around the portal."""

from dataclasses import replace

from cluster.labels import LABEL_GANG, RENDEZVOUS_TOKEN_ENV
from cluster.manifests import render_job
from cluster.namespaces import NetworkSpec, render_network_policies, render_rendezvous_policy, render_resource_quota
from tests.cluster.test_manifests import NAMESPACE, pod_spec, spec
from tests.netpolicy import Pod, allows_ingress

NETWORK = NetworkSpec(namespace="team-llm", team_slug="llm")


def pod_of(manifest, name: str, namespace: str = "team-llm") -> Pod:
    return Pod(name=name, namespace=namespace, labels=manifest["spec"]["template"]["metadata"]["labels"])


def policies(network=NETWORK, *gang_ids):
    per_job = [
        render_rendezvous_policy(namespace=network.namespace, team_slug="llm", job_id=job_id, job_name=f"rsv-{job_id}")
        for job_id in gang_ids
    ]
    return [*render_network_policies(network), *per_job]


def test_only_the_pods_of_the_same_gang_reach_its_rendezvous_port():
    gang = render_job(spec(nodes=2, job_id=42, name="rsv-42"))
    rank0, rank1 = pod_of(gang, "rsv-42-0"), pod_of(gang, "rsv-42-1")
    neighbour = pod_of(render_job(spec(job_id=43, name="rsv-43")), "rsv-43-x")
    other_gang = pod_of(render_job(spec(nodes=2, job_id=44, name="rsv-44")), "rsv-44-0")
    stranger = Pod(name="intruder", namespace="team-vision", labels=dict(rank1.labels))  # same labels, other team
    namespaces = {"team-llm": {"kubernetes.io/metadata.name": "team-llm"}}
    namespaces["team-vision"] = {"kubernetes.io/metadata.name": "team-vision"}
    rules = policies(NETWORK, 42, 44)

    def reaches(source, port):
        return allows_ingress(rules, source=source, target=rank0, port=port, namespaces=namespaces)

    assert reaches(rank1, 29500)
    assert not reaches(neighbour, 29500) and not reaches(other_gang, 29500) and not reaches(stranger, 29500)
    # Other ports of a gang's pods stay open to the team's own pods (NCCL's connections), never to another team's.
    assert reaches(neighbour, 41000) and reaches(neighbour, 29499) and reaches(neighbour, 29501)
    assert not reaches(stranger, 41000)
    # Without its per-job policy (not made yet, or deleted by hand) the rendezvous port is closed, not open.
    assert not allows_ingress(policies(NETWORK), source=rank1, target=rank0, port=29500, namespaces=namespaces)


def test_a_one_node_jobs_pods_are_reached_from_their_namespace_and_the_named_ones_only():
    job = pod_of(render_job(spec(job_id=43, name="rsv-43")), "rsv-43-x")
    colleague = Pod(name="notebook", namespace="team-llm", labels={})
    scraper = Pod(name="prometheus-0", namespace="monitoring", labels={"app": "prometheus"})
    stranger = Pod(name="x", namespace="team-vision", labels={})
    namespaces = {name: {"kubernetes.io/metadata.name": name} for name in ("team-llm", "monitoring", "team-vision")}
    closed = policies()
    opened = policies(replace(NETWORK, ingress_namespaces=("monitoring",)))
    assert allows_ingress(closed, source=colleague, target=job, port=8080, namespaces=namespaces)
    assert not allows_ingress(closed, source=scraper, target=job, port=9400, namespaces=namespaces)
    assert allows_ingress(opened, source=scraper, target=job, port=9400, namespaces=namespaces)
    assert not allows_ingress(opened, source=stranger, target=job, port=8080, namespaces=namespaces)


def test_every_pod_is_selected_by_exactly_one_standing_policy():
    from tests.netpolicy import selects

    gang = pod_of(render_job(spec(nodes=2)), "g")
    single = pod_of(render_job(spec()), "s")
    assert gang.labels[LABEL_GANG] == "true" and LABEL_GANG not in single.labels
    for pod in (gang, single, Pod(name="around-the-portal", namespace="team-llm", labels={})):
        assert sum(selects(policy, pod) for policy in render_network_policies(NETWORK)) == 1


def test_egress_is_left_open_unless_the_platform_closes_it():
    for policy in render_network_policies(NETWORK):
        assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    closed = render_network_policies(replace(NETWORK, egress_open=False, egress_cidrs=("10.20.0.0/16",)))
    for policy in closed:
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        egress = policy["spec"]["egress"]
        assert {"podSelector": {}} in egress[0]["to"]  # its own namespace
        assert {"protocol": "UDP", "port": 53} in egress[1]["ports"]  # the cluster DNS
        assert egress[2] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}


def test_a_gang_gets_a_rendezvous_token_and_a_one_node_job_none():
    env = {
        e["name"]: e.get("value")
        for e in pod_spec(render_job(spec(nodes=2, rendezvous_token="t0k")))["containers"][0]["env"]
    }
    assert env[RENDEZVOUS_TOKEN_ENV] == "t0k"
    single = pod_spec(render_job(spec(rendezvous_token="t0k")))["containers"][0]["env"]
    assert RENDEZVOUS_TOKEN_ENV not in {e["name"] for e in single}


def test_the_quota_caps_claims_and_closes_the_storage_classes_team_volumes_may_not_use():
    quota = render_resource_quota(
        replace(
            NAMESPACE,
            max_volumes=3,
            max_volume_storage_gib=500,
            storage_classes=("fast",),
            closed_storage_classes=("local-data",),
        )
    )["spec"]["hard"]
    assert quota["requests.storage"] == "500Gi" and quota["persistentvolumeclaims"] == "3"
    assert quota["fast.storageclass.storage.k8s.io/requests.storage"] == "500Gi"
    assert quota["local-data.storageclass.storage.k8s.io/requests.storage"] == "0"
    assert quota["local-data.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
