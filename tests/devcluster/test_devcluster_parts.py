"""The pieces of the development cluster that need no running cluster: topology, PKI, stages, the build's errors."""

from __future__ import annotations

import base64
import datetime
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from devcluster import build, certs, kueue, launcher, topology, versions


def test_demo_topology_is_the_seed_pools():
    demo = topology.load()
    assert [pool.name for pool in demo.pools] == ["inference", "training", "elastic", "reserved"]
    assert demo.pool("inference").node_names == ("gpu-node-01", "gpu-node-02")
    assert demo.pool("training").node_names == ("gpu-node-10", "gpu-node-11")
    assert demo.pool("elastic").node_names == ("gpu-node-20",)
    assert len(demo.pool("reserved").node_names) == 4
    assert demo.gpu_count == 9 * 8

    node = demo.pool("elastic").node_manifest("gpu-node-20")
    assert node["metadata"]["labels"]["spot"] == "true"
    assert node["metadata"]["labels"]["workload-tier"] == "elastic"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["spec"]["taints"] == [
        {"key": "workload", "value": "elastic", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
    ]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    reserved = demo.pool("reserved").node_manifest("reserved-a800-01")["metadata"]["labels"]
    assert reserved["scheduling.eks.ebcloud.com/node-pool"] == "reserved"
    assert reserved["nvidia.com/gpu.product"] == "NVIDIA-A800-SXM4-80GB"


def test_every_demo_volume_is_assigned_to_a_demo_team():
    """The portal's claims of local-data bind only volumes labelled with their team: none stands open to all."""
    volumes = [m for m in topology.load().storage_manifests() if m["kind"] == "PersistentVolume"]
    teams = {m["metadata"]["name"]: m["metadata"]["labels"].get("reservoir.io/team") for m in volumes}
    assert teams == {"demo-data-01": "llm", "demo-data-02": "vision", "demo-data-03": "speech", "demo-data-04": "llm"}


def test_scaling_keeps_pool_proportions_and_named_nodes():
    scaled = topology.load(scale_nodes=1000)
    assert scaled.node_count == 1000
    sizes = {pool.name: len(pool.node_names) for pool in scaled.pools}
    assert sizes["reserved"] > sizes["training"] > sizes["elastic"] >= 1
    assert scaled.pool("training").node_names[:2] == ("gpu-node-10", "gpu-node-11")
    names = [node["metadata"]["name"] for node in scaled.node_manifests()]
    assert len(set(names)) == 1000


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"pools": [{"name": "p", "count": 1, "gpuModel": "x"}]}, "nvidia.com/gpu"),
        ({"pools": [{"name": "p", "capacity": {"nvidia.com/gpu": 8}, "gpuModel": "x"}]}, "either nodes"),
        (
            {
                "pools": [
                    {
                        "name": "p",
                        "count": 1,
                        "gpuModel": "x",
                        "capacity": {"nvidia.com/gpu": 8},
                        "taints": [{"key": "a", "effect": "Sometimes"}],
                    }
                ]
            },
            "effect must be",
        ),
        (
            {
                "pools": [
                    {"name": "p", "nodes": ["a"], "gpuModel": "x", "capacity": {"nvidia.com/gpu": 8}},
                    {"name": "q", "nodes": ["a"], "gpuModel": "x", "capacity": {"nvidia.com/gpu": 8}},
                ]
            },
            "unique",
        ),
    ],
)
def test_malformed_topologies_are_refused_with_the_place(document, complaint):
    with pytest.raises(topology.TopologyError, match=complaint):
        topology.parse(document, source="t.yaml")


def test_pki_chains_to_its_ca_and_is_made_once(tmp_path):
    pki = certs.ensure_pki(tmp_path / "pki")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.apiserver_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin_cert.read_bytes())
    for leaf in (serving, admin):
        leaf.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", certs.KUBERNETES_SERVICE_IP]
    organisations = [a.value for a in admin.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)]
    assert organisations == ["system:masters"]
    assert oct(pki.admin_key.stat().st_mode & 0o777) == "0o600"

    before = pki.ca_cert.read_bytes()
    certs.ensure_pki(tmp_path / "pki")
    assert pki.ca_cert.read_bytes() == before


def test_kwok_config_holds_every_stage(tmp_path):
    cluster = launcher.Cluster(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    documents = list(yaml.safe_load_all(cluster._write_kwok_config(12345).read_text()))
    assert documents[0]["kind"] == "KwokConfiguration"
    assert documents[0]["options"]["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    stages = {document["metadata"]["name"] for document in documents[1:]}
    assert stages == {
        "node-ready",
        "node-heartbeat",
        "pod-running",
        "pod-complete",
        "pod-failed",
        "pod-terminate",
        "pod-delete",
    }
    complete = next(d for d in documents[1:] if d["metadata"]["name"] == "pod-complete")
    assert "pod-complete.stage.kwok.x-k8s.io/delay" in complete["spec"]["delay"]["durationFrom"]["expressionFrom"]
    terminate = next(d for d in documents[1:] if d["metadata"]["name"] == "pod-terminate")
    assert terminate["spec"]["delay"]["durationMilliseconds"] == 0  # a deleted pod stops at once unless it says
    assert "pod-terminate.stage.kwok.x-k8s.io/delay" in terminate["spec"]["delay"]["durationFrom"]["expressionFrom"]


def test_fake_node_leases_and_the_node_monitor_grace_period_keep_a_kubelets_proportions(tmp_path):
    def lease_seconds(cluster):
        options = next(yaml.safe_load_all(cluster._write_kwok_config(12345).read_text()))["options"]
        return options["nodeLeaseDurationSeconds"]

    assert lease_seconds(launcher.Cluster(tmp_path)) == launcher.DEFAULT_NODE_LEASE_SECONDS == 160
    assert lease_seconds(launcher.Cluster(tmp_path, node_lease_seconds=40)) == 40
    # A kubelet's defaults: a 40 s Lease, renewed every 10 s; the controller-manager waits 50 s.
    assert launcher.node_monitor_grace_period(40) == "50s"
    assert launcher.node_monitor_grace_period(160) == "200s"


def test_cache_is_versioned_and_not_built_without_a_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("RESERVOIR_CACHE", str(tmp_path))
    directory = build.bin_dir()
    assert directory == tmp_path / versions.cache_dir_name() / "bin"
    assert versions.KUBERNETES_VERSION in str(directory) and versions.KWOK_VERSION in str(directory)
    directory.mkdir(parents=True)
    for name in versions.BINARIES:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    module = build.kueue_module_dir()
    assert module == tmp_path / "go" / "mod" / f"sigs.k8s.io/kueue@{versions.KUEUE_VERSION}"
    (module / "config/components/crd/bases").mkdir(parents=True)
    (module / "config/components/webhook").mkdir(parents=True)
    (module / "config/components/webhook/manifests.yaml").write_text("")
    assert not build.is_built()
    # A stamp written before Kueue was added (or for another Kueue version) does not count as built.
    (directory / build.STAMP_NAME).write_text(json.dumps({"kubernetes": versions.KUBERNETES_VERSION}))
    assert not build.is_built()
    (directory / build.STAMP_NAME).write_text(json.dumps({"kueue": "v0.16.0"}))
    assert not build.is_built()
    (directory / build.STAMP_NAME).write_text(json.dumps({"kueue": versions.KUEUE_VERSION}))
    assert build.is_built()
    (module / "config/components/webhook/manifests.yaml").unlink()  # module cache cleaned: fetch it again
    assert not build.is_built()


def test_a_cache_without_kueue_gets_kueue_alone(tmp_path, monkeypatch):
    """The control plane's binaries are there (an older cache): the build goes straight to Kueue."""
    monkeypatch.setenv("RESERVOIR_CACHE", str(tmp_path))
    monkeypatch.setenv("GOPROXY", "off")  # so Kueue's fetch fails at once, naming the module
    directory = build.bin_dir()
    directory.mkdir(parents=True)
    for name in versions.BINARIES:
        if name != "kueue":
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)
    messages: list[str] = []
    with pytest.raises(build.BuildError, match=r"sigs\.k8s\.io/kueue@v0\.17\.0"):
        build._Builder(progress=messages.append).run()
    assert {"etcd: already built", "kwok: already built", "kubernetes: already built"} <= set(messages)
    assert messages[-1] == f"fetching {versions.KUEUE_MODULE}@{versions.KUEUE_VERSION}"
    assert not (directory / build.STAMP_NAME).exists()


def test_unreachable_module_is_named_in_the_build_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RESERVOIR_CACHE", str(tmp_path))
    monkeypatch.setenv("GOPROXY", "off")  # as if the proxy could not be reached
    builder = build._Builder(progress=lambda message: None)
    builder.work.mkdir(parents=True)
    with pytest.raises(build.BuildError, match=r"sigs\.k8s\.io/kwok@v0\.8\.0"):
        builder.fetch(versions.KWOK_MODULE, versions.KWOK_VERSION)


def test_down_stops_only_the_processes_it_recorded(tmp_path):
    cluster = launcher.Cluster(tmp_path)
    ours = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        record = launcher.ProcessRecord(
            name="etcd",
            pid=ours.pid,
            create_time=__import__("psutil").Process(ours.pid).create_time(),
            binary="sleep",
            port=1,
            health_url="http://127.0.0.1:1/health",
            log=str(tmp_path / "etcd.log"),
        )
        # A record whose pid was reused by another program must be left alone.
        reused = launcher.ProcessRecord(**{**record.__dict__, "name": "kwok", "pid": stranger.pid, "create_time": 1.0})
        cluster._write_state({"processes": [record.__dict__, reused.__dict__]})

        assert cluster.down() == ["etcd"]
        assert ours.wait(timeout=5) is not None
        assert stranger.poll() is None
        assert not cluster.state_file.exists()
    finally:
        for process in (ours, stranger):
            if process.poll() is None:
                os.kill(process.pid, 15)
                process.wait()


def test_no_binary_is_tracked_in_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files", "devcluster"], capture_output=True, text=True, cwd=Path(launcher.REPO_ROOT)
    ).stdout.split()
    assert not any(Path(name).name in versions.BINARIES for name in tracked)


def test_up_without_binaries_and_without_the_proxy_fails_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("RESERVOIR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "off")
    cluster = launcher.Cluster(tmp_path / "state")
    with pytest.raises(build.BuildError, match=r"cannot fetch Go module go\.etcd\.io/etcd/server/v3@"):
        cluster.up()
    assert not cluster.status().running


def test_kueue_configuration_is_for_a_process_on_loopback_with_wait_for_pods_ready(tmp_path):
    config = kueue.configuration(
        health_port=1001, metrics_port=1002, webhook_port=1003, cert_dir=tmp_path, pods_ready_timeout="90s"
    )
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["namespace"] == "kueue-system"
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:1001"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:1002"}
    assert config["webhook"] == {"port": 1003, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["waitForPodsReady"] == {
        "timeout": "90s",
        "blockAdmission": False,
        # A gang evicted by the timeout is requeued after a backoff from its eviction (60 s, 120 s, ... ≤ 1 h).
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    # Several reconciles at a time for Jobs and Workloads (one is controller-runtime's default).
    assert config["controller"]["groupKindConcurrency"]["Job.batch"] == 20
    assert config["controller"]["groupKindConcurrency"]["Workload.kueue.x-k8s.io"] == 5


@pytest.mark.parametrize("text", ["5", "five minutes", "-5m", "0s", ""])
def test_a_pods_ready_timeout_that_is_no_go_duration_is_refused(text):
    with pytest.raises(kueue.KueueError, match="Go duration"):
        kueue.check_duration(text)


MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  failurePolicy: Fail
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  admissionReviewVersions: [v1]
  sideEffects: None
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
- name: mworkload.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}}
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vappwrapper.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-appwrapper}}
  rules: [{apiGroups: [workload.codeflare.dev], apiVersions: [v1beta2], operations: [CREATE], resources: [appwrappers]}]
- name: vjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-batch-v1-job}}
  failurePolicy: Fail
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [jobs]}]
"""


def test_webhook_configurations_keep_jobs_and_kueue_objects_and_call_loopback():
    documents = kueue.webhook_configurations(MANIFESTS, port=9443, ca_bundle=b"PEM")
    by_kind = {document["kind"]: document for document in documents}
    mutating, validating = by_kind["MutatingWebhookConfiguration"], by_kind["ValidatingWebhookConfiguration"]
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    assert [w["name"] for w in mutating["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io"]
    assert [w["name"] for w in validating["webhooks"]] == ["vjob.kb.io"]
    job = mutating["webhooks"][0]
    assert job["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert job["failurePolicy"] == "Fail" and job["rules"][0]["resources"] == ["jobs"]


def test_webhook_manifests_without_job_entries_are_refused():
    with pytest.raises(kueue.KueueError, match="batch/v1 Jobs"):
        kueue.webhook_configurations(
            MANIFESTS.replace("resources: [jobs]", "resources: [cronjobs]"), port=1, ca_bundle=b""
        )


def test_kueue_webhook_pair_is_for_loopback_signed_by_the_cluster_ca_and_kept(tmp_path):
    pki = certs.ensure_pki(tmp_path / "pki")
    directory = certs.ensure_serving_pair(pki, tmp_path / "kueue", common_name="kueue-webhook")
    cert = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    before = (directory / "tls.crt").read_bytes()
    certs.ensure_serving_pair(pki, tmp_path / "kueue", common_name="kueue-webhook")
    assert (directory / "tls.crt").read_bytes() == before

    other = certs.ensure_pki(tmp_path / "other-pki")  # a new CA: the old pair no longer chains to it
    certs.ensure_serving_pair(other, tmp_path / "kueue", common_name="kueue-webhook")
    renewed = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    renewed.verify_directly_issued_by(x509.load_pem_x509_certificate(other.ca_cert.read_bytes()))


def test_shared_metrics_pair_is_written_only_when_missing_or_invalid(tmp_path):
    shared = tmp_path / "etc-kueue-metrics-certs"
    assert certs.ensure_shared_serving_pair(shared, common_name="kueue-metrics") is True
    first = (shared / "tls.crt").read_bytes(), (shared / "tls.key").read_bytes()
    # A second cluster starting finds a valid pair and leaves it (another cluster's Kueue may be serving it).
    assert certs.ensure_shared_serving_pair(shared, common_name="kueue-metrics") is False
    assert ((shared / "tls.crt").read_bytes(), (shared / "tls.key").read_bytes()) == first
    assert certs.pair_is_valid(shared / "tls.crt", shared / "tls.key")

    (shared / "tls.key").write_text("not a key")
    assert certs.ensure_shared_serving_pair(shared, common_name="kueue-metrics") is True
    assert certs.pair_is_valid(shared / "tls.crt", shared / "tls.key")
    assert oct((shared / "tls.key").stat().st_mode & 0o777) == "0o600"
    assert not list(shared.glob(".*.tmp"))


def test_a_pair_close_to_expiry_is_not_valid(tmp_path, monkeypatch):
    monkeypatch.setattr(certs, "VALIDITY", datetime.timedelta(hours=12))
    certs.ensure_shared_serving_pair(tmp_path, common_name="kueue-metrics")
    assert not certs.pair_is_valid(tmp_path / "tls.crt", tmp_path / "tls.key")


def test_a_process_is_known_by_its_start_in_ticks_since_boot_not_by_the_wall_clock(tmp_path):
    """A step of the machine's clock (a virtual machine paused and resumed) moves every wall-clock start time: the
    launcher must still know its processes (or it reports them not running and `down` leaves them behind), and must
    still tell a reused pid apart."""
    import psutil

    from devcluster.processes import ProcessRecord, start_ticks

    ours = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        # Between fork and exec the child still shows Python's command line: wait for sleep's (as the launcher does).
        deadline = time.monotonic() + 10
        while psutil.Process(ours.pid).cmdline()[:1] != ["sleep"]:
            assert time.monotonic() < deadline, "sleep did not start"
        ticks = start_ticks(ours.pid)
        assert ticks is not None
        fields = {"name": "etcd", "pid": ours.pid, "binary": "sleep", "port": 1, "health_url": "", "log": ""}
        stepped = ProcessRecord(**fields, create_time=1.0, start_ticks=ticks)  # wall-clock start far off
        assert stepped.process() is not None
        reused = ProcessRecord(**fields, create_time=1.0, start_ticks=ticks + 1)  # the pid of another start
        assert reused.process() is None
        legacy = ProcessRecord(**fields, create_time=1.0)  # no ticks recorded: the wall-clock check decides
        assert legacy.process() is None
    finally:
        ours.kill()
        ours.wait()
