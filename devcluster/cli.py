"""Command line: ``python -m devcluster build|up|down|status|env|monitoring|hydra``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from devcluster import build, hydra_build, launcher, topology
from devcluster import hydra as hydra_module
from devcluster import kueue as kueue_module
from devcluster import monitoring as monitoring_module


def _progress(message: str) -> None:
    print(f"[devcluster] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster", description="A local Kubernetes control plane.")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_state_dir(command: argparse.ArgumentParser) -> argparse.ArgumentParser:
        command.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help=f"where PKI, kubeconfig, logs and pids live (default: {launcher.DEFAULT_STATE_DIR})",
        )
        return command

    sub.add_parser("build", help="build the binaries (and hydra) into the versioned cache if any is missing")
    sub.add_parser("helm", help="build helm alone if it is missing; print its path")
    up = with_state_dir(sub.add_parser("up", help="build if needed, start, create the topology's nodes"))
    up.add_argument("--topology", type=Path, default=None, help=f"default: {topology.DEFAULT_TOPOLOGY.name}")
    up.add_argument("--scale-nodes", type=int, default=None, help="scale the topology's pools to N nodes in all")
    up.add_argument(
        "--kueue-pods-ready-timeout",
        default=None,
        metavar="DURATION",
        help="Kueue's waitForPodsReady timeout, a Go duration (default: what runs, else "
        f"{kueue_module.DEFAULT_PODS_READY_TIMEOUT}; env RESERVOIR_KUEUE_PODS_READY_TIMEOUT)",
    )
    down = with_state_dir(sub.add_parser("down", help="stop the processes `up` started"))
    down.add_argument("--purge", action="store_true", help="also delete the state directory")
    with_state_dir(sub.add_parser("status", help="say what runs and whether it is healthy"))
    with_state_dir(sub.add_parser("env", help="print the KUBECONFIG to export"))
    monitoring = with_state_dir(
        sub.add_parser("monitoring", help="Prometheus and the fake DCGM exporter beside the cluster")
    )
    monitoring.add_argument("action", choices=("up", "down", "status", "env"))
    monitoring.add_argument("--scrape-interval", type=float, default=2.0, help="seconds (default 2)")
    monitoring.add_argument("--portal-target", default="", help="also scrape the portal's /metrics at HOST:PORT")
    monitoring.add_argument("--hot", action="append", default=[], help="NODE/GPU that runs hot (repeatable)")
    monitoring.add_argument("--fresh", action="store_true", help="start Prometheus from an empty TSDB")
    hydra = with_state_dir(sub.add_parser("hydra", help="the demo OpenID Connect provider (ory/hydra) for make dev"))
    hydra.add_argument("action", choices=("up", "down", "env", "logins"))
    hydra.add_argument("--portal-url", default="http://127.0.0.1:8000", help="where the portal answers (redirect URI)")
    args = parser.parse_args(argv)

    try:
        if args.command == "build":
            print(build.ensure_built(_progress))
            # The OpenID Connect provider of the sign-in tests and `make dev` (tests/identity, devcluster/hydra.py).
            print(hydra_build.ensure_built(_progress))
            return 0
        if args.command == "helm":
            print(build.ensure_helm(_progress))
            return 0
        if args.command == "hydra":
            return _hydra(args)
        cluster = launcher.Cluster(args.state_dir, progress=_progress)
        if args.command == "monitoring":
            return _monitoring(cluster, args)
        if args.command == "up":
            cluster.up(
                args.topology,
                scale_nodes=args.scale_nodes,
                kueue_pods_ready_timeout=args.kueue_pods_ready_timeout
                or os.environ.get("RESERVOIR_KUEUE_PODS_READY_TIMEOUT")
                or None,
            )
            print(cluster.env())
        elif args.command == "down":
            stopped = cluster.down()
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
            if args.purge:
                import shutil

                shutil.rmtree(cluster.state_dir, ignore_errors=True)
                print(f"removed {cluster.state_dir}")
        elif args.command == "status":
            status = cluster.status()
            print(status.describe())
            return 0 if status.healthy else 3
        elif args.command == "env":
            if not cluster.kubeconfig_path.exists():
                print(
                    f"devcluster: no kubeconfig in {cluster.state_dir}; run: python -m devcluster up", file=sys.stderr
                )
                return 1
            print(cluster.env())
    except (
        build.BuildError,
        launcher.ClusterError,
        kueue_module.KueueError,
        topology.TopologyError,
        monitoring_module.MonitoringError,
        hydra_module.HydraError,
    ) as error:
        print(f"devcluster: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _monitoring(cluster: launcher.Cluster, args: argparse.Namespace) -> int:
    stack = monitoring_module.Monitoring(cluster.state_dir, progress=_progress)
    if args.action == "up":
        if not cluster.kubeconfig_path.exists():
            print(f"devcluster: no kubeconfig in {cluster.state_dir}; run: python -m devcluster up", file=sys.stderr)
            return 1
        stack.up(
            cluster.kubeconfig_path,
            scrape_interval=args.scrape_interval,
            portal_target=args.portal_target,
            hot=tuple(args.hot),
            fresh=args.fresh,
        )
        print(f"export PROMETHEUS_URL={stack.prometheus_url}")
    elif args.action == "down":
        stopped = stack.down()
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    elif args.action == "status":
        print(stack.describe())
        return 0 if stack.healthy() else 3
    elif args.action == "env":
        if not stack.prometheus_url:
            print("devcluster: monitoring is not running; run: python -m devcluster monitoring up", file=sys.stderr)
            return 1
        print(f"export PROMETHEUS_URL={stack.prometheus_url}")
    return 0


def _hydra(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or launcher.DEFAULT_STATE_DIR
    if args.action == "up":
        database = os.environ.get("DATABASE_URL") or "postgres://reservoir:reservoir@127.0.0.1:5432/reservoir"
        print(hydra_module.dev_up(Path(state_dir), database_base_url=database, portal_url=args.portal_url))
    elif args.action == "down":
        stopped = hydra_module.dev_down(Path(state_dir))
        print("stopped: " + (", ".join(map(str, stopped)) if stopped else "nothing was running"))
    elif args.action == "env":
        print(hydra_module.dev_env(Path(state_dir)))
    elif args.action == "logins":
        print(hydra_module.dev_logins())
    return 0
