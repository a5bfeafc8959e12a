"""Benchmark of what an idle local control plane with 1,000 GPU nodes costs: CPU per component, and whether every
node stays Ready, for a given node Lease duration (kwok renews each Lease every quarter of it).

It starts a cluster (Kueue included) in its own state directory, adds the nodes, waits `--settle-seconds`, then
samples each process's CPU time over `--idle-seconds` and counts the Ready nodes at the end. The last line printed
is a JSON summary (``cpu_cores`` per component: CPU seconds ÷ wall seconds).

Usage: ``python bench/cluster_idle.py [--nodes 1000] [--node-lease-seconds 40] [--idle-seconds 120]``; with
``--shared-cluster`` it measures the cluster already up in ``--state-dir`` (its nodes added to it, its Lease duration
as it was started) and leaves it running.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.harness import NUMBER, Run, add_cluster_arguments, logger, start_cluster, stop_cluster  # noqa: E402
from devcluster import launcher, topology  # noqa: E402

# The figures devcluster/README.md quotes: CPU per component and in all, the nodes still Ready.
SUMMARY_KEYS = {
    "nodes": int,
    "node_lease_seconds": int,
    "idle_seconds": NUMBER,
    "cpu_cores.kube-apiserver": NUMBER,
    "cpu_cores.kwok": NUMBER,
    "cpu_cores_total": NUMBER,
    "nodes_ready": int,
}


def cpu_seconds(cluster: launcher.Cluster) -> dict[str, float]:
    result = {}
    for record in cluster.records():
        process = record.process()
        if process is not None:
            times = process.cpu_times()
            result[record.name] = times.user + times.system
    return result


def lease_seconds(cluster: launcher.Cluster) -> int:
    """The node Lease duration the running cluster's kwok was started with (its configuration's first document)."""
    import yaml

    options = yaml.safe_load((cluster.state_dir / "kwok.yaml").read_text().split("\n---\n")[0])["options"]
    return options["nodeLeaseDurationSeconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--node-lease-seconds", type=int, default=launcher.DEFAULT_NODE_LEASE_SECONDS)
    parser.add_argument("--settle-seconds", type=float, default=60)
    parser.add_argument("--idle-seconds", type=float, default=120)
    add_cluster_arguments(parser, "devcluster-bench-idle")
    args = parser.parse_args()
    run = Run("cluster_idle")
    report = logger("bench")
    pool = topology.Pool(
        name="idle",
        node_names=tuple(f"idle-gpu-{number:05d}" for number in range(1, args.nodes + 1)),
        gpu_model="NVIDIA-A800-SXM4-80GB",
        labels={"node-role": "idle"},
        capacity={"nvidia.com/gpu": "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
        allocatable={"nvidia.com/gpu": "8", "cpu": "94", "memory": "750Gi", "pods": "110"},
    )
    cluster = None
    try:
        cluster = start_cluster(
            args,
            topology.Topology(pools=(pool,), source="bench/cluster_idle.py"),
            log=report,
            node_lease_seconds=args.node_lease_seconds,
        )
        time.sleep(args.settle_seconds)
        before, started = cpu_seconds(cluster), time.monotonic()
        time.sleep(args.idle_seconds)
        after, wall = cpu_seconds(cluster), time.monotonic() - started
        status = cluster.status()
        node_lease_seconds = lease_seconds(cluster)
    finally:
        stop_cluster(args, cluster)
    cores = {name: round((after[name] - before[name]) / wall, 3) for name in after if name in before}
    summary = {
        "nodes": args.nodes,
        "node_lease_seconds": node_lease_seconds,
        "shared_cluster": args.shared_cluster,
        "idle_seconds": round(wall, 1),
        "cpu_cores": cores,
        "cpu_cores_total": round(sum(cores.values()), 3),
        "nodes_ready": status.nodes_ready,
    }
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
