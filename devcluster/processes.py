"""The pieces the launcher is made of: a record of each process it started (and how to tell it is still that
process), the status it reports, and a small JSON client for the API server."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from devcluster import certs

# Taints a node carries until the controller-manager has seen it Ready.
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat, field 22). Unlike a start time on the
    wall clock (psutil's create_time is boot time + these ticks, and the boot time is read from the wall clock), it
    does not move when the machine's clock is stepped, e.g. after a virtual machine was paused and resumed."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": field 3 (state) is fields[0]
    return int(fields[19])


@dataclass
class ProcessRecord:
    """One process the launcher started."""

    name: str
    pid: int
    create_time: float
    binary: str
    port: int
    health_url: str
    log: str
    start_ticks: int | None = None  # records written before it existed have none: create_time is compared then

    def process(self) -> psutil.Process | None:
        """The live process, or None when the pid is gone or now belongs to someone else. Its identity is its start in
        ticks since boot; a record without it falls back to the wall-clock start time, within a second."""
        try:
            process = psutil.Process(self.pid)
            if self.start_ticks is not None:
                if start_ticks(self.pid) != self.start_ticks:
                    return None
            elif abs(process.create_time() - self.create_time) > 1.0:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            cmdline = process.cmdline()
            if not cmdline or cmdline[0] != self.binary:
                return None
            return process
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None


@dataclass
class ComponentStatus:
    name: str
    running: bool
    healthy: bool
    pid: int | None = None
    port: int | None = None
    log: str | None = None
    detail: str = ""


@dataclass
class ClusterStatus:
    state_dir: Path
    components: list[ComponentStatus] = field(default_factory=list)
    nodes_total: int | None = None
    nodes_ready: int | None = None

    @property
    def healthy(self) -> bool:
        return bool(self.components) and all(component.healthy for component in self.components)

    @property
    def running(self) -> list[ComponentStatus]:
        return [component for component in self.components if component.running]

    def describe(self) -> str:
        lines = [f"state directory: {self.state_dir}"]
        if not self.components:
            lines.append("not started")
        for component in self.components:
            log = f"  log {component.log}" if component.log else ""
            if component.running:
                state = "healthy" if component.healthy else f"UNHEALTHY ({component.detail})"
                lines.append(f"  {component.name:<24} pid {component.pid:<8} port {component.port:<6} {state}{log}")
            else:
                why = f" ({component.detail})" if component.detail not in ("", "not running") else ""
                lines.append(f"  {component.name:<24} not running{why}{log}")
        if self.nodes_total is not None:
            lines.append(f"nodes: {self.nodes_ready}/{self.nodes_total} Ready")
        lines.append("cluster: " + ("healthy" if self.healthy else "NOT healthy"))
        return "\n".join(lines)


class ApiConnection:
    """A minimal JSON client for the API server over the admin client certificate (one connection per thread).

    The launcher uses it instead of the kubernetes package: it starts in milliseconds and does not turn 1,000
    nodes into model objects."""

    def __init__(self, port: int, pki: certs.PKI, timeout: float = 30.0):
        self.port = port
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(pki.ca_cert))
        self.context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=self.timeout)
            self._local.connection = connection
        return connection

    def request(self, method: str, path: str, body: Any = None, *, content_type: str | None = None) -> tuple[int, Any]:
        """Send ``body`` as JSON (``content_type`` overrides the header, e.g. for server-side apply's
        ``application/apply-patch+yaml``, of which JSON is a subset); return the status and the decoded answer."""
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type or "application/json"
        for attempt in range(2):
            connection = self._connection()
            try:
                connection.request(method, path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
                break
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
        try:
            decoded = json.loads(data) if data else None
        except json.JSONDecodeError:
            decoded = data.decode(errors="replace")
        return response.status, decoded


def node_usable(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(item.get("type") == "Ready" and item.get("status") == "True" for item in conditions)
    taints = node.get("spec", {}).get("taints") or []
    return ready and not any(taint.get("key") in NOT_READY_TAINTS for taint in taints)


def spawn(name: str, argv: list[str], *, port: int, health_url: str, log_path: Path, cwd: Path) -> ProcessRecord:
    """Start `argv` in a session of its own (it outlives the launcher, e.g. under `make dev`), appending its
    output to `log_path`, and record it once it has exec'd.

    Between fork and exec the child still shows the launcher's command line; on a busy machine, or when the binary
    is not yet in the page cache, that gap is long enough for a health check to take the child for someone else's
    process. So wait (briefly) for the exec before recording."""
    with log_path.open("ab") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        process = subprocess.Popen(  # noqa: S603 - binaries from our own build cache, our exporter, Debian's prometheus
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    child = psutil.Process(process.pid)
    create_time = child.create_time()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if child.cmdline()[:1] == [argv[0]]:
                break
        except psutil.Error:
            break
        time.sleep(0.01)
    return ProcessRecord(
        name, process.pid, create_time, argv[0], port, health_url, str(log_path), start_ticks=start_ticks(process.pid)
    )


def read_state(path: Path) -> dict[str, Any]:
    """The recorded state of a set of processes ({} when there is none or it is unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write the state atomically (a reader never sees half a file)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    temporary.replace(path)
