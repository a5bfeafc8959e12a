"""The configuration files the launcher writes into the cluster's state directory before it starts the processes:
the admin kubeconfig, the scheduler's configuration and kwok's (its options and every stage in `stages/`)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devcluster import certs
from devcluster import topology as topology_module

STAGES_DIR = Path(__file__).with_name("stages")
# Fake pod IPs come from here; nothing ever sends traffic to them (there is no pod network).
POD_CIDR = "10.64.0.0/10"


class ConfigFiles:
    """Writers of the files a `Cluster` (devcluster/launcher.py) hands its processes; they read the cluster's
    `state_dir`, `kubeconfig_path`, `pki`, `node_lease_seconds` and `tuning`."""

    def _write_kubeconfig(self, port: int) -> None:
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "reservoir-dev",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority-data": b64(self.pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": certs.ADMIN_USER,
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_cert),
                        "client-key-data": b64(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "reservoir-dev", "context": {"cluster": "reservoir-dev", "user": certs.ADMIN_USER}}],
            "current-context": "reservoir-dev",
        }
        temporary = self.kubeconfig_path.with_suffix(".tmp")
        temporary.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        temporary.chmod(0o600)
        temporary.replace(self.kubeconfig_path)

    def _write_scheduler_config(self) -> Path:
        path = self.state_dir / "scheduler.yaml"
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {
                "kubeconfig": str(self.kubeconfig_path),
                "qps": self.tuning.scheduler_qps,
                "burst": self.tuning.scheduler_burst,
            },
            "leaderElection": {"leaderElect": False},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _write_kwok_config(self, port: int) -> Path:
        path = self.state_dir / "kwok.yaml"
        options = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "cidr": POD_CIDR,
                "nodeIP": "127.0.0.1",
                "nodePort": port,
                "serverAddress": f"127.0.0.1:{port}",
                "manageAllNodes": False,
                "manageNodesWithAnnotationSelector": (
                    f"{topology_module.KWOK_NODE_ANNOTATION}={topology_module.KWOK_NODE_ANNOTATION_VALUE}"
                ),
                "nodeLeaseDurationSeconds": self.node_lease_seconds,
                "nodePlayStageParallelism": 16,
                "podPlayStageParallelism": 16,
                "nodeLeaseParallelism": 16,
            },
        }
        documents = [yaml.safe_dump(options, sort_keys=False)]
        documents += [stage.read_text() for stage in sorted(STAGES_DIR.glob("*.yaml"))]
        path.write_text("\n---\n".join(documents))
        return path
