"""The pieces of the development cluster that need no running cluster: topology, PKI, stages, the build's errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from devcluster import build, certs, launcher, topology, versions


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


def test_cache_is_versioned_and_not_built_without_a_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("RESERVOIR_CACHE", str(tmp_path))
    directory = build.bin_dir()
    assert directory == tmp_path / versions.cache_dir_name() / "bin"
    assert versions.KUBERNETES_VERSION in str(directory) and versions.KWOK_VERSION in str(directory)
    directory.mkdir(parents=True)
    for name in versions.BINARIES:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    assert not build.is_built()
    (directory / build.STAMP_NAME).write_text("{}")
    assert build.is_built()


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
