"""The services the fault benchmark (bench/faults.py) runs of its own and breaks, one at a time: a PostgreSQL cluster,
a Redis with append-only persistence, and the portal's processes as `make dev` starts them, each under
scripts/supervise.sh."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from bench.harness import REPO_ROOT, free_port
from bench.harness import wait_for as wait

# One PostgreSQL cluster per checkout: the benchmark drops the one of its name before it starts, so two checkouts'
# suites running at once (two CI clones on one machine) must never share a name.
PG_CLUSTER = "benchfaults_" + hashlib.sha1(str(REPO_ROOT).encode()).hexdigest()[:8]  # noqa: S324 - a name, not a secret


class Postgres:
    """A PostgreSQL cluster of the benchmark's own (Debian's pg_createcluster), on a free port."""

    def __init__(self):
        self.version = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: [int(p) for p in v.split(".")])[-1]
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgres://reservoir:reservoir@127.0.0.1:{self.port}/reservoir"

    def _ctl(self, *args: str) -> None:
        subprocess.run(["pg_ctlcluster", self.version, PG_CLUSTER, *args], check=True)

    def create(self) -> None:
        self.drop()
        subprocess.run(
            ["pg_createcluster", self.version, PG_CLUSTER, "-p", str(self.port)], check=True, stdout=subprocess.DEVNULL
        )
        self.start()
        psql = ["runuser", "-u", "postgres", "--", "psql", "-p", str(self.port), "-qc"]
        subprocess.run([*psql, "create role reservoir login createdb password 'reservoir'"], check=True)
        subprocess.run([*psql, "create database reservoir owner reservoir"], check=True)

    def start(self) -> None:
        self._ctl("start")
        wait(self.ready, timeout=30, what="PostgreSQL")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def ready(self) -> bool:
        result = subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True)
        return result.returncode == 0

    def drop(self) -> None:
        listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True).stdout.split()
        if PG_CLUSTER in listed:
            subprocess.run(["pg_dropcluster", "--stop", self.version, PG_CLUSTER], check=False)


class Redis:
    """redis-server with append-only persistence (as scripts/services.sh runs it), on a free port."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
            [shutil.which("redis-server"), "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--dir", str(self.directory), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
            + ["--logfile", str(self.directory / "redis.log")],
            # Never the benchmark's own output: a Redis left running would hold it open, and whoever waits for the
            # benchmark's output to end (the smoke tests) would wait for ever.
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait(self.ready, timeout=20, what="Redis")

    def ready(self) -> bool:
        result = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
        return "PONG" in result.stdout

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()  # a clean shutdown: the append-only file is flushed
            self.process.wait(timeout=30)
            self.process = None


class Portal:
    """The portal's processes as `make dev` starts them: each under scripts/supervise.sh (started again when it
    exits), in a process group of its own."""

    def __init__(self, env: dict, logs: Path):
        self.env = env
        self.logs = logs
        self.web_port = free_port()
        self.processes: dict[str, subprocess.Popen] = {}
        python = sys.executable
        celery = str(Path(sys.executable).parent / "celery")
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        self.commands = {
            "web": [gunicorn, "portal.wsgi:application", "--bind", f"127.0.0.1:{self.web_port}"]
            + ["--worker-class", "gthread", "--workers", "2", "--threads", "4", "--log-level", "warning"],
            "worker": [celery, "-A", "portal", "worker", "-Q", "default,billing", "-c", "2"]
            + ["--loglevel=INFO", "--without-mingle", "--without-gossip"],
            "cluster-worker": [celery, "-A", "portal", "worker", "-Q", "cluster", "-P", "threads", "-c", "8"]
            + ["-n", "cluster@%h", "--loglevel=INFO", "--without-mingle", "--without-gossip"],
            "beat": [celery, "-A", "portal", "beat", "--loglevel=INFO", "--schedule", str(logs / "beat-schedule")],
            "outbox": [python, "manage.py", "dispatch_outbox"],
            "sync": [python, "manage.py", "sync_cluster"],
        }

    def start(self, name: str) -> None:
        supervised = ["bash", str(REPO_ROOT / "scripts" / "supervise.sh"), name, *self.commands[name]]
        with (self.logs / f"{name}.log").open("a") as out:
            self.processes[name] = subprocess.Popen(  # noqa: S603 - our own commands
                supervised, cwd=REPO_ROOT, env=self.env, stdout=out, stderr=out, start_new_session=True
            )
        if name == "web":
            wait(self._web_up, timeout=60, what="the web server")

    def crash(self, name: str) -> None:
        """SIGKILL the process (and its children, e.g. the worker's pool), not its supervisor: it starts again."""
        import psutil

        supervisor = psutil.Process(self.processes[name].pid)
        for child in supervisor.children():
            if child.name() == "sleep":
                continue
            for process in [*child.children(recursive=True), child]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signal.SIGKILL)

    def restarts(self, name: str) -> int:
        return (self.logs / f"{name}.log").read_text(errors="replace").count(f"[supervise] {name} exited")

    def _web_up(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.web_port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200

    def kill(self, name: str, sig: int = signal.SIGKILL, *, timeout: float = 30) -> None:
        """Send `sig` to the process's supervisor and wait for it to exit; it is forgotten only once it has (a
        TimeoutExpired leaves it known, to be killed harder). SIGKILL goes to the whole group (the supervisor and what
        it runs); any other signal to the supervisor alone, which passes it on to its command once: sent to the group
        as well, the command got it twice, and Celery beat's shutdown handler, entered again while it held its own
        lock, deadlocked (beat then ran on after its TERM, and after its supervisor had gone)."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            if sig == signal.SIGKILL:
                os.killpg(process.pid, sig)
            else:
                os.kill(process.pid, sig)
        process.wait(timeout=timeout)
        del self.processes[name]

    def stop_all(self, *, timeout: float = 30) -> None:
        """Stop every process: TERM, and KILL for one still running after `timeout` seconds."""
        for name in list(self.processes):
            try:
                self.kill(name, signal.SIGTERM, timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(name, signal.SIGKILL, timeout=timeout)
