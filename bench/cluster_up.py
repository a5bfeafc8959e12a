"""Benchmark of the local control plane (devcluster): how fast it comes up and how it holds 1,000 GPU nodes.

Measures, with the binaries already built (it builds them first if they are missing, outside the timing):
- ``up_seconds``: wall time of ``python -m devcluster up`` on a stopped state directory, from the command's start
  to every component healthy (Kueue included: /readyz answered, webhooks registered) and the 9 demo nodes Ready
  (target < 20 s);
- ``nodes_ready_seconds``: from the first create of 1,000 more eight-GPU nodes to all of them Ready and
  schedulable (not-ready taint lifted) (target < 60 s);
- resident memory (RSS) of each control-plane process and in total, after ``up`` and with the 1,000 nodes.

Usage: ``python bench/cluster_up.py [--nodes 1000] [--state-dir DIR] [--keep]``. The last line printed is a JSON
summary. The cluster is stopped at the end unless ``--keep`` (the smoke tests, tests/bench/, run it with ``--nodes 2
--keep`` and then run the other cluster benchmarks on the cluster it left up).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.harness import NUMBER, STATE_ROOT, Run, logger  # noqa: E402
from devcluster import build, launcher, topology  # noqa: E402

TARGETS = {"up_seconds": 20.0, "nodes_ready_seconds": 60.0}
# The figures the READMEs quote: the time to healthy, the nodes' time to Ready, the control plane's memory.
SUMMARY_KEYS = {
    "up_seconds": NUMBER,
    "nodes_added": int,
    "nodes_ready_seconds": NUMBER,
    "nodes_ready_total": int,
    "rss_mib_after_up.kube-apiserver": NUMBER,
    "rss_mib_after_up.kueue": NUMBER,
    "rss_mib_with_nodes.kube-apiserver": NUMBER,
    "rss_mib_total_after_up": NUMBER,
    "rss_mib_total_with_nodes": NUMBER,
    "within_targets": bool,
}


def rss_by_component(cluster: launcher.Cluster) -> dict[str, float]:
    """Resident memory in MiB of each process the cluster's state records (Kueue included)."""
    result = {}
    for record in cluster.records():
        process = record.process()
        if process is not None:
            result[record.name] = round(process.memory_info().rss / 2**20, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="eight-GPU nodes to add (default 1000)")
    parser.add_argument("--state-dir", type=Path, default=STATE_ROOT / "devcluster-bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()
    run = Run("devcluster")
    report = logger("bench")

    build.ensure_built(report)
    cluster = launcher.Cluster(args.state_dir, progress=report)
    cluster.down()

    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "devcluster", "up", "--state-dir", str(args.state_dir)], cwd=REPO_ROOT, check=True
    )
    up_seconds = time.monotonic() - started
    rss_after_up = rss_by_component(cluster)
    report(f"up in {up_seconds:.1f}s, control plane RSS {sum(rss_after_up.values()):.0f} MiB")

    bench_pool = topology.Pool(
        name="bench",
        node_names=tuple(f"bench-gpu-{number:05d}" for number in range(1, args.nodes + 1)),
        gpu_model="NVIDIA-A800-SXM4-80GB",
        labels={"node-role": "bench", "gpu-type": "a800"},
        taints=(topology.Taint(key="workload", value="bench", effect="NoSchedule"),),
        capacity={"nvidia.com/gpu": "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
        allocatable={"nvidia.com/gpu": "8", "cpu": "94", "memory": "750Gi", "pods": "110"},
    )
    nodes_ready_seconds = cluster.apply_topology(topology.Topology(pools=(bench_pool,), source="bench"), timeout=300)
    time.sleep(5)  # let the informers and kwok's leases settle before reading memory
    rss_with_nodes = rss_by_component(cluster)
    status = cluster.status()
    report(status.describe())

    if not args.keep:
        cluster.down()

    summary = {
        "versions": {
            "kubernetes": build.versions.KUBERNETES_VERSION,
            "etcd": build.versions.ETCD_VERSION,
            "kwok": build.versions.KWOK_VERSION,
            "kueue": build.versions.KUEUE_VERSION,
        },
        "up_seconds": round(up_seconds, 2),
        "nodes_added": args.nodes,
        "nodes_ready_seconds": round(nodes_ready_seconds, 2),
        "nodes_ready_total": status.nodes_ready,
        "rss_mib_after_up": rss_after_up,
        "rss_mib_total_after_up": round(sum(rss_after_up.values()), 1),
        "rss_mib_with_nodes": rss_with_nodes,
        "rss_mib_total_with_nodes": round(sum(rss_with_nodes.values()), 1),
        "targets": TARGETS,
        "within_targets": up_seconds < TARGETS["up_seconds"] and nodes_ready_seconds < TARGETS["nodes_ready_seconds"],
    }
    run.finish(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
