"""Start, check and stop a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
KWOK, then Kueue (``devcluster/kueue.py``), each a real process on 127.0.0.1 with a free port, logging to a file in
the state directory.

The idea: everything a cluster needs lives in one state directory (PKI, kubeconfig, component configs, etcd data,
logs, and ``cluster.json`` with the pid, start time and port of every process). Processes run in their own session
so they outlive the launcher; ``down`` reads ``cluster.json`` and stops exactly those pids, after checking that each
pid still is the process it started (same start time, same binary). ``up`` is idempotent: on a healthy cluster it
only makes sure the topology's nodes are there and Ready. A fresh ``up`` starts from an empty etcd, so every run
sees the same cluster; the PKI is kept, so credentials someone exported stay valid. On a healthy control plane
whose Kueue is missing (a cluster started before Kueue was added) or unhealthy, ``up`` starts or repairs Kueue
alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from devcluster import build, certs
from devcluster import kueue as kueue_module
from devcluster import topology as topology_module
from devcluster import tuning as tuning_module
from devcluster.config_files import ConfigFiles
from devcluster.nodes import ClusterError, NodesAndStorage
from devcluster.processes import (
    ApiConnection,
    ClusterStatus,
    ComponentStatus,
    ProcessRecord,
    free_port,
    node_usable,
    read_state,
    spawn,
    tail,
    write_state,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE_DIR = REPO_ROOT / ".state" / "devcluster"
STATE_FILE = "cluster.json"
# The control plane; Kueue (kueue_module.NAME) is started after it and recorded beside it.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Each fake node's Lease lasts this long; kwok renews it every quarter of that, as a kubelet does (a kubelet's
# default is 40 s: 1,000 nodes then write 100 Leases a second, half a core of this machine's two while the cluster
# idles). The node lifecycle controller marks a node unreachable after NODE_MONITOR_GRACE_FACTOR × this without a
# renewal (50 s for 40 s, its own default).
DEFAULT_NODE_LEASE_SECONDS = 160
NODE_MONITOR_GRACE_FACTOR = 1.25


def node_monitor_grace_period(node_lease_seconds: int) -> str:
    """The controller-manager's --node-monitor-grace-period for fake nodes with Leases of this duration."""
    return f"{round(node_lease_seconds * NODE_MONITOR_GRACE_FACTOR)}s"


class Cluster(ConfigFiles, NodesAndStorage):
    """A local control plane in one state directory.

    >>> cluster = Cluster(state_dir)                 # doctest: +SKIP
    >>> cluster.up()                                 # builds if needed, starts, puts the demo nodes in, waits
    >>> cluster.kubeconfig_path                      # admin kubeconfig for kubectl, the portal and tests
    >>> cluster.down()                               # stops the processes it started
    """

    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        progress: Callable[[str], None] | None = None,
        node_lease_seconds: int = DEFAULT_NODE_LEASE_SECONDS,
        tuning: str = tuning_module.TUNED.name,
    ):
        self.node_lease_seconds = node_lease_seconds
        # how hard the controllers may drive the API server (devcluster/tuning.py): read when they start
        self.tuning = tuning_module.named(tuning)
        self.state_dir = Path(state_dir or os.environ.get("RESERVOIR_DEVCLUSTER_STATE") or DEFAULT_STATE_DIR)
        self.state_dir = self.state_dir.expanduser().resolve()
        self.progress = progress or (lambda message: None)
        self.pki = certs.PKI(self.state_dir / "pki")
        self.kueue = kueue_module.Kueue(self)
        self._lock_depth = 0

    # -- paths -----------------------------------------------------------------------------------------------------
    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def log_path(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    # -- state -----------------------------------------------------------------------------------------------------
    def _read_state(self) -> dict[str, Any]:
        return read_state(self.state_file)

    def _write_state(self, state: dict[str, Any]) -> None:
        write_state(self.state_file, state)

    def records(self, state: dict[str, Any] | None = None) -> list[ProcessRecord]:
        state = self._read_state() if state is None else state
        return [ProcessRecord(**record) for record in state.get("processes", [])]

    def running_tuning(self) -> str | None:
        """The tuning (devcluster/tuning.py) the running control plane was started with; None if not recorded."""
        return self._read_state().get("tuning")

    @property
    def apiserver_port(self) -> int | None:
        return self._read_state().get("apiserver_port")

    def api(self) -> ApiConnection:
        port = self.apiserver_port
        if port is None:
            raise ClusterError(f"no cluster is running in {self.state_dir}")
        return ApiConnection(port, self.pki)

    def api_client(self):
        """A kubernetes.client.ApiClient for this cluster's admin kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def env(self) -> str:
        return f"export KUBECONFIG={self.kubeconfig_path}"

    # -- health ----------------------------------------------------------------------------------------------------
    def _check_health(self, record: ProcessRecord, timeout: float = 2.0) -> tuple[bool, str]:
        url = record.health_url
        scheme, rest = url.split("://", 1)
        hostport, _, path = rest.partition("/")
        host, port = hostport.split(":")
        try:
            if scheme == "https":
                if record.name == "kube-apiserver":
                    context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
                    context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
                else:  # controller-manager and scheduler serve a self-signed certificate of their own
                    context = ssl._create_unverified_context()  # noqa: S323 - loopback health probe only
                connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=timeout)
            else:
                connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
            connection.request("GET", "/" + path)
            response = connection.getresponse()
            body = response.read().decode(errors="replace").strip()
            connection.close()
        except (OSError, http.client.HTTPException) as error:
            return False, f"{type(error).__name__}: {error}"
        if response.status != 200:
            return False, f"HTTP {response.status}: {body[:200]}"
        if record.name == "etcd" and '"health":"true"' not in body.replace(" ", ""):
            return False, body[:200]
        return True, "ok"

    def status(self, *, count_nodes: bool = True) -> ClusterStatus:
        """Each recorded process: alive, healthy, port, log. Kueue is healthy when it answers /readyz and both its
        webhook configurations call it; a cluster without a Kueue record reports Kueue as not running."""
        state = self._read_state()
        result = ClusterStatus(self.state_dir)
        for record in self.records(state):
            alive = record.process() is not None
            healthy, detail = self._check_health(record) if alive else (False, "not running")
            if healthy and record.name == kueue_module.NAME:
                problem = self.kueue.health_problem(record)
                healthy, detail = problem is None, problem or detail
            result.components.append(
                ComponentStatus(record.name, alive, healthy, record.pid, record.port, record.log, detail)
            )
        if result.components and not any(c.name == kueue_module.NAME for c in result.components):
            log = str(self.log_path(kueue_module.NAME))
            result.components.append(ComponentStatus(kueue_module.NAME, False, False, log=log, detail="not started"))
        if count_nodes and result.healthy:
            try:
                code, body = self.api().request("GET", "/api/v1/nodes")
                if code == 200:
                    nodes = body.get("items", [])
                    result.nodes_total = len(nodes)
                    result.nodes_ready = sum(1 for node in nodes if node_usable(node))
            except (OSError, http.client.HTTPException):
                pass
        return result

    def is_healthy(self) -> bool:
        return self.status(count_nodes=False).healthy

    @staticmethod
    def _control_plane_healthy(status: ClusterStatus) -> bool:
        healthy = {component.name for component in status.components if component.healthy}
        return set(COMPONENTS) <= healthy

    # -- start -----------------------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], port: int, health_url: str) -> ProcessRecord:
        return spawn(name, argv, port=port, health_url=health_url, log_path=self.log_path(name), cwd=self.state_dir)

    def _wait_healthy(self, records: Iterable[ProcessRecord], timeout: float) -> None:
        pending = list(records)
        deadline = time.monotonic() + timeout
        last_detail: dict[str, str] = {}
        while pending:
            for record in list(pending):
                if record.process() is None:
                    raise ClusterError(
                        f"{record.name} exited while starting; last lines of {record.log}:\n{tail(Path(record.log))}"
                    )
                healthy, detail = self._check_health(record)
                if healthy:
                    pending.remove(record)
                    self.progress(f"{record.name} healthy (port {record.port})")
                else:
                    last_detail[record.name] = detail
            if not pending:
                return
            if time.monotonic() > deadline:
                record = pending[0]
                raise ClusterError(
                    f"{record.name} not healthy after {timeout:.0f}s ({last_detail.get(record.name)}); "
                    f"last lines of {record.log}:\n{tail(Path(record.log))}"
                )
            time.sleep(0.1)

    def _start_processes(self, binaries: Path, on_apiserver_ready: Callable[[], None] | None = None) -> None:
        """Start etcd, the API server (and, once it answers, call ``on_apiserver_ready``), then the
        controller-manager, scheduler and kwok; wait until each is healthy."""
        ports = {name: free_port() for name in (*COMPONENTS, "etcd-peer")}
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self._write_kubeconfig(ports["kube-apiserver"])
        etcd_data = self.state_dir / "etcd"
        if etcd_data.exists():
            subprocess.run(["rm", "-rf", str(etcd_data)], check=True)  # a fresh cluster on every start
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        state: dict[str, Any] = {
            "started_at": time.time(),
            "apiserver_port": ports["kube-apiserver"],
            "processes": [],
        }
        kubeconfig = str(self.kubeconfig_path)

        def launch(name: str, argv: list[str], health_url: str) -> ProcessRecord:
            record = self._spawn(name, argv, ports[name], health_url)
            state["processes"].append(record.__dict__)
            self._write_state(state)  # recorded at once, so `down` can stop it even if `up` dies now
            return record

        etcd = launch(
            "etcd",
            [
                str(binaries / "etcd"),
                "--name=devcluster",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=devcluster={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",  # a throwaway development database: no fsync on every write
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            f"{etcd_url}/health",
        )
        self._wait_healthy([etcd], timeout=30)

        apiserver = launch(
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['kube-apiserver']}",
                f"--cert-dir={self.state_dir / 'apiserver-certs'}",
                f"--tls-cert-file={self.pki.apiserver_cert}",
                f"--tls-private-key-file={self.pki.apiserver_key}",
                f"--client-ca-file={self.pki.ca_cert}",
                f"--requestheader-client-ca-file={self.pki.front_proxy_ca_cert}",
                f"--requestheader-allowed-names={certs.FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={self.pki.front_proxy_client_cert}",
                f"--proxy-client-key-file={self.pki.front_proxy_client_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.pki.service_account_public_key}",
                f"--service-account-signing-key-file={self.pki.service_account_key}",
                f"--service-cluster-ip-range={certs.SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=Node,RBAC",
                # Fake nodes answer on 127.0.0.1 (kwok's server); never resolve their names through DNS.
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",  # the `kubernetes` Endpoints may not hold a loopback address
                "--allow-privileged=true",
                "--profiling=false",
                "--max-requests-inflight=1000",
                "--max-mutating-requests-inflight=500",
                "--event-ttl=1h",
                # Close open watches 2 s into a shutdown: otherwise a restart waits on its clients' watches
                # (Kueue's, the controller-manager's, ...) for 30 s and more.
                "--shutdown-watch-termination-grace-period=2s",
            ],
            f"https://127.0.0.1:{ports['kube-apiserver']}/readyz",
        )
        self._wait_healthy([apiserver], timeout=120)
        if on_apiserver_ready is not None:
            on_apiserver_ready()

        controller_manager = launch(
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-controller-manager']}",
                f"--cert-dir={self.state_dir / 'controller-manager-certs'}",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--cluster-signing-cert-file={self.pki.ca_cert}",
                f"--cluster-signing-key-file={self.pki.ca_key}",
                f"--service-cluster-ip-range={certs.SERVICE_CLUSTER_IP_RANGE}",
                # devcluster/tuning.py says why these
                f"--kube-api-qps={self.tuning.controller_manager_qps}",
                f"--kube-api-burst={self.tuning.controller_manager_burst}",
                f"--concurrent-job-syncs={self.tuning.concurrent_job_syncs}",
                # As long, relative to the fake nodes' Leases, as its default is to a kubelet's (50 s for 40 s).
                f"--node-monitor-grace-period={node_monitor_grace_period(self.node_lease_seconds)}",
                "--profiling=false",
            ],
            f"https://127.0.0.1:{ports['kube-controller-manager']}/healthz",
        )
        scheduler = launch(
            "kube-scheduler",
            [
                str(binaries / "kube-scheduler"),
                f"--config={self._write_scheduler_config()}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports['kube-scheduler']}",
                f"--cert-dir={self.state_dir / 'scheduler-certs'}",
                "--profiling=false",
            ],
            f"https://127.0.0.1:{ports['kube-scheduler']}/healthz",
        )
        kwok = launch(
            "kwok",
            [
                str(binaries / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={self._write_kwok_config(ports['kwok'])}",
                "--manage-all-nodes=false",
            ],
            f"http://127.0.0.1:{ports['kwok']}/healthz",
        )
        self._wait_healthy([controller_manager, scheduler, kwok], timeout=60)

    # -- public commands -------------------------------------------------------------------------------------------
    def up(
        self,
        topology: topology_module.Topology | Path | str | None = None,
        *,
        scale_nodes: int | None = None,
        build_if_missing: bool = True,
        kueue_pods_ready_timeout: str | None = None,
    ) -> bool:
        """Start the cluster with ``topology`` (the demo topology by default) unless it is already up and healthy;
        on a healthy control plane whose Kueue is missing or unhealthy, start or repair Kueue alone.
        ``kueue_pods_ready_timeout`` (a Go duration, default 5m) is Kueue's waitForPodsReady timeout; None keeps
        the running Kueue's. Returns True when it started the control plane, False when one was already running."""
        if not isinstance(topology, topology_module.Topology):
            topology = topology_module.load(topology, scale_nodes=scale_nodes)
        elif scale_nodes:
            topology = topology.scaled(scale_nodes)
        if kueue_pods_ready_timeout is not None:
            kueue_module.check_duration(kueue_pods_ready_timeout)
        with self._lock():
            return self._up(topology, build_if_missing, kueue_pods_ready_timeout)

    def _binaries(self, build_if_missing: bool) -> Path:
        if build_if_missing:
            return build.ensure_built(self.progress)
        if build.is_built():
            return build.bin_dir()
        raise ClusterError(f"the binaries are not built in {build.bin_dir()}; run: python -m devcluster build")

    def _up(self, topology: topology_module.Topology, build_if_missing: bool, pods_ready_timeout: str | None) -> bool:
        current = self.status(count_nodes=False)
        if self._control_plane_healthy(current):
            running_timeout = self.kueue.settings().get("pods_ready_timeout")
            if current.healthy and pods_ready_timeout in (None, running_timeout):
                self.progress(f"already up and healthy in {self.state_dir}")
            elif self.kueue.ensure(lambda: self._binaries(build_if_missing), pods_ready_timeout=pods_ready_timeout):
                self.progress("control plane already up; started Kueue")
            self.apply_topology(topology)
            return False
        if current.running:
            self.progress("a previous start is half running; stopping it first")
            self.down()
        binaries = self._binaries(build_if_missing)
        certs.ensure_pki(self.pki.directory)
        started = time.monotonic()
        try:
            # The API server takes seconds over Kueue's CRDs: apply them while the other components start and the
            # nodes come up, then start Kueue once they are served.
            with ThreadPoolExecutor(max_workers=1) as background:
                crds: list[Future] = []
                self._start_processes(
                    binaries, on_apiserver_ready=lambda: crds.append(background.submit(self.kueue.apply_crds))
                )
                self.apply_topology(topology)
                kueue = self.kueue.start(
                    binaries,
                    pods_ready_timeout=pods_ready_timeout or kueue_module.DEFAULT_PODS_READY_TIMEOUT,
                    crds=crds[0].result(),
                )
            self.kueue.finish_start(kueue)
        except BaseException:
            self.down()
            raise
        state = self._read_state()
        state["topology"] = {"source": topology.source, "nodes": topology.node_count, "gpus": topology.gpu_count}
        state["tuning"] = self.tuning.name
        state["up_seconds"] = round(time.monotonic() - started, 2)
        self._write_state(state)
        self.progress(f"up in {time.monotonic() - started:.1f}s; {self.env()}")
        return True

    def restart_component(self, name: str, *, timeout: float = 120.0, down_for: float = 0.0) -> None:
        """Stop one running component and start it again with the same command line and port (its data, e.g.
        etcd's, is kept), `down_for` seconds after it stopped: for tests of how the portal lives through an
        apiserver or Kueue restart.

        Kueue's webhooks stay registered while it is down (Job creates fail until it is back, rather than a
        labelled Job starting unsuspended); once it answers again they are re-registered if they were removed."""
        state = self._read_state()
        for entry in state.get("processes", []):
            if entry["name"] != name:
                continue
            record = ProcessRecord(**entry)
            process = record.process()
            if process is None:
                raise ClusterError(f"{name} is not running")
            argv = process.cmdline()
            process.terminate()
            try:
                process.wait(timeout=30)
            except psutil.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            time.sleep(down_for)
            new = self._spawn(name, argv, record.port, record.health_url)
            entry.update(new.__dict__)
            self._write_state(state)
            self._wait_healthy([new], timeout=timeout)
            if name == kueue_module.NAME:
                self.kueue.register_webhooks(new)
            return
        raise ClusterError(f"no component named {name} in {self.state_file}")

    def down(self, *, timeout: float = 20.0) -> list[str]:
        """Stop the processes this state directory records, and only those: first Kueue (after deleting its
        webhook configurations, while the API server still answers), then kwok, the scheduler and the
        controller-manager, then the API server, then etcd (the API server's shutdown still talks to etcd).
        Returns the names it stopped. Prometheus and the DCGM exporter of `devcluster monitoring`, when they run
        beside this cluster, are stopped first."""
        from devcluster.monitoring import Monitoring

        with self._lock():
            Monitoring(self.state_dir, progress=self.progress).down()
            records = {record.name: record for record in self.records()}
            if kueue_module.NAME in records and "kube-apiserver" in records:
                self.kueue.remove_webhooks()
            waves = [
                [kueue_module.NAME],
                [name for name in records if name not in ("kube-apiserver", "etcd", kueue_module.NAME)],
                ["kube-apiserver"],
                ["etcd"],
            ]
            stopped: list[str] = []
            for wave in waves:
                stopped += self._stop([records[name] for name in wave if name in records], timeout)
            self.state_file.unlink(missing_ok=True)
            return stopped

    def stop_kueue(self) -> list[str]:
        """Delete Kueue's webhook configurations, then stop Kueue alone (what ``down`` does first); the control
        plane keeps running and accepts every Job again. The next ``up`` starts Kueue."""
        with self._lock():
            return self.kueue.stop()

    def _stop(self, records: list[ProcessRecord], timeout: float) -> list[str]:
        signalled = []
        for record in records:
            process = record.process()
            if process is None:
                continue
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                continue
            signalled.append((record, process))
        deadline = time.monotonic() + timeout
        for record, process in signalled:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                self.progress(f"{record.name} (pid {record.pid}) did not stop on SIGTERM; killing it")
                process.kill()
                process.wait(timeout=5)
            except psutil.NoSuchProcess:
                pass
            self.progress(f"stopped {record.name} (pid {record.pid})")
        return [record.name for record, _ in signalled]

    @contextlib.contextmanager
    def _lock(self):
        """One launcher at a time per state directory (re-entrant within this object): a second `up` waits for
        the first instead of finding a half-started cluster and stopping it."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / ".lock").open("w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.progress(f"another launcher is working on {self.state_dir}; waiting for it")
                fcntl.flock(handle, fcntl.LOCK_EX)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
