"""Prometheus and the fake DCGM exporter beside a local cluster: ``python -m devcluster monitoring up|down|status``.

The idea: the same pattern as the control plane (``launcher.py``), kept apart so that ``devcluster up`` stays
fast. Both processes live in ``<state dir>/monitoring/`` with their logs, Prometheus' config and TSDB, and
``monitoring.json`` (pid, start time, binary and port of each, plus the settings they were started with), and
outlive the command that started them; ``down`` stops exactly those pids. ``up`` is idempotent: when both run,
are healthy and were started with the same settings, it leaves them alone; otherwise it restarts them.

Prometheus is Debian's ``prometheus`` package (``scripts/services.sh`` installs it when it is missing) and listens
on 127.0.0.1 only. It scrapes the exporter every ``scrape_interval`` seconds (2 s by default, so tests see a new
sample quickly) and, when given one, the portal's own ``/metrics``.
"""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from devcluster.processes import ProcessRecord, free_port, read_state, spawn, tail, write_state

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_CANDIDATES = ("/usr/bin/prometheus", "/usr/local/bin/prometheus")
STATE_FILE = "monitoring.json"


class MonitoringError(RuntimeError):
    """Prometheus or the exporter could not be started; the message says which and why."""


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or next((p for p in PROMETHEUS_CANDIDATES if Path(p).exists()), None)
    if not found:
        raise MonitoringError(
            "Prometheus is not installed; run scripts/services.sh (it installs Debian's prometheus package) "
            "or: apt-get install --no-install-recommends prometheus"
        )
    return found


@dataclass(frozen=True)
class Settings:
    """What the processes were started with: a change means a restart."""

    kubeconfig: str
    scrape_interval: float = 2.0
    portal_target: str = ""
    hot: tuple[str, ...] = ()
    retention: str = "2d"


class Monitoring:
    """Prometheus and the DCGM exporter for the cluster of ``kubeconfig``, in ``<state_dir>/monitoring``."""

    def __init__(self, state_dir: Path | str, *, progress=None):
        self.directory = Path(state_dir).expanduser().resolve() / "monitoring"
        self.progress = progress or (lambda message: None)

    @property
    def state_file(self) -> Path:
        return self.directory / STATE_FILE

    def _read_state(self) -> dict[str, Any]:
        return read_state(self.state_file)

    def _write_state(self, state: dict[str, Any]) -> None:
        write_state(self.state_file, state)

    def records(self) -> list[ProcessRecord]:
        return [ProcessRecord(**record) for record in self._read_state().get("processes", [])]

    @property
    def prometheus_url(self) -> str | None:
        port = self._read_state().get("prometheus_port")
        return f"http://127.0.0.1:{port}" if port else None

    @property
    def exporter_url(self) -> str | None:
        port = self._read_state().get("exporter_port")
        return f"http://127.0.0.1:{port}/metrics" if port else None

    # -- health ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _probe(url: str, timeout: float = 2.0) -> tuple[bool, str]:
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, port = hostport.split(":")
        try:
            connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
            connection.request("GET", "/" + path)
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            connection.close()
        except (OSError, http.client.HTTPException) as error:
            return False, f"{type(error).__name__}: {error}"
        return response.status == 200, f"HTTP {response.status}: {body[:200].strip()}"

    def status(self) -> list[tuple[ProcessRecord, bool, str]]:
        rows = []
        for record in self.records():
            if record.process() is None:
                rows.append((record, False, "not running"))
            else:
                healthy, detail = self._probe(record.health_url)
                rows.append((record, healthy, "healthy" if healthy else detail))
        return rows

    def healthy(self) -> bool:
        rows = self.status()
        return len(rows) == 2 and all(healthy for _, healthy, _ in rows)

    def describe(self) -> str:
        rows = self.status()
        if not rows:
            return f"monitoring: not started ({self.directory})"
        lines = [f"monitoring: {self.directory}"]
        for record, _healthy, detail in rows:
            lines.append(f"  {record.name:<24} pid {record.pid:<8} port {record.port:<6} {detail}")
        if self.prometheus_url:
            lines.append(f"PROMETHEUS_URL={self.prometheus_url}")
        return "\n".join(lines)

    # -- start and stop --------------------------------------------------------------------------------------------
    def _write_prometheus_config(self, settings: Settings, exporter_port: int) -> Path:
        interval = f"{settings.scrape_interval:g}s"
        scrape_configs = [
            {
                "job_name": "dcgm-exporter",
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
            }
        ]
        if settings.portal_target:
            scrape_configs.append(
                {
                    "job_name": "reservoir-portal",
                    "scrape_interval": "15s",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [settings.portal_target]}],
                }
            )
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": scrape_configs,
        }
        path = self.directory / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _spawn(self, name: str, argv: list[str], port: int, health_url: str) -> ProcessRecord:
        cwd = REPO_ROOT if name == "dcgm-exporter" else self.directory  # the exporter imports devcluster
        log_path = self.directory / "logs" / f"{name}.log"
        return spawn(name, argv, port=port, health_url=health_url, log_path=log_path, cwd=cwd)

    def _wait_healthy(self, record: ProcessRecord, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        detail = ""
        while time.monotonic() < deadline:
            if record.process() is None:
                raise MonitoringError(
                    f"{record.name} exited while starting; last lines of {record.log}:\n{tail(Path(record.log))}"
                )
            healthy, detail = self._probe(record.health_url)
            if healthy:
                self.progress(f"{record.name} healthy (port {record.port})")
                return
            time.sleep(0.1)
        raise MonitoringError(f"{record.name} not healthy after {timeout:.0f}s ({detail}); see {record.log}")

    def up(
        self,
        kubeconfig: Path | str,
        *,
        scrape_interval: float = 2.0,
        portal_target: str = "",
        hot: tuple[str, ...] = (),
        fresh: bool = False,
    ) -> bool:
        """Start the exporter and Prometheus unless they run healthy with these settings. Returns True when it
        started them. ``fresh`` empties Prometheus' TSDB first."""
        settings = Settings(str(Path(kubeconfig).resolve()), float(scrape_interval), portal_target, tuple(hot))
        state = self._read_state()
        if self.healthy() and state.get("settings") == json.loads(json.dumps(asdict(settings))) and not fresh:
            self.progress(f"monitoring already up: {self.prometheus_url}")
            return False
        self.down()
        binary = prometheus_binary()
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        data = self.directory / "prometheus-data"
        if fresh and data.exists():
            shutil.rmtree(data)
        exporter_port, prometheus_port = free_port(), free_port()
        state = {
            "started_at": time.time(),
            "settings": asdict(settings),
            "exporter_port": exporter_port,
            "prometheus_port": prometheus_port,
            "processes": [],
        }
        started = time.monotonic()
        try:
            argv = [
                sys.executable,
                "-m",
                "devcluster.dcgm_exporter",
                f"--kubeconfig={settings.kubeconfig}",
                f"--port={exporter_port}",
                f"--refresh={min(1.0, settings.scrape_interval / 2):g}",
            ]
            argv += [f"--hot={item}" for item in hot]
            exporter = self._spawn_recorded(state, "dcgm-exporter", argv, exporter_port, "/healthz")
            self._wait_healthy(exporter, timeout=30)
            config = self._write_prometheus_config(settings, exporter_port)
            argv = [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--storage.tsdb.retention.time={settings.retention}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ]
            prometheus = self._spawn_recorded(state, "prometheus", argv, prometheus_port, "/-/ready")
            self._wait_healthy(prometheus, timeout=60)
        except BaseException:
            self.down()
            raise
        self.progress(f"monitoring up in {time.monotonic() - started:.1f}s: PROMETHEUS_URL={self.prometheus_url}")
        return True

    def _spawn_recorded(self, state: dict, name: str, argv: list[str], port: int, path: str) -> ProcessRecord:
        record = self._spawn(name, argv, port, f"http://127.0.0.1:{port}{path}")
        state["processes"].append(record.__dict__)
        self._write_state(state)  # recorded at once, so `down` can stop it even if `up` dies now
        return record

    def down(self, timeout: float = 15.0) -> list[str]:
        """Stop the recorded processes (and only those). Returns the names it stopped."""
        stopped = []
        for record in reversed(self.records()):
            process = record.process()
            if process is None:
                continue
            try:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=timeout)
            except psutil.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
            except psutil.NoSuchProcess:
                pass
            stopped.append(record.name)
            self.progress(f"stopped {record.name} (pid {record.pid})")
        self.state_file.unlink(missing_ok=True)
        return stopped
