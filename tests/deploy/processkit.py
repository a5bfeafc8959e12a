"""The portal's processes as the chart runs them, on this machine: each process kind's command and environment are
read from its rendered Deployment (the values its Secrets would hold are given here), and its kubeconfig holds only
its own ServiceAccount's token, as in a pod. Stopped by their process ids; their logs are kept for the failure
message, and any 403 in them fails the test that ran them."""

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.chartkit import Release
from tests.deploy.conftest import ROOT

VENV_BIN = Path(sys.executable).parent
# A refusal of the API server as the portal's code and the Kubernetes client write it in their logs.
# ("(403)" and "Reason: Forbidden" from the client's ApiException, "403 Forbidden" from cluster.errors.describe.)
FORBIDDEN = re.compile(r"\(403\)|403 Forbidden|[Ff]orbidden")


def chart_environment(release: Release, component: str, secrets: dict[str, str]) -> dict[str, str]:
    """The environment the chart gives the component's container: plain values as rendered, Secret references
    from `secrets`, the pod's namespace from the release, its address as the loopback's."""
    [container] = release.deployment(component)["spec"]["template"]["spec"]["containers"]
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry["valueFrom"]:
            ref = entry["valueFrom"]["secretKeyRef"]
            if ref["key"] in secrets:
                env[entry["name"]] = secrets[ref["key"]]
            else:
                assert ref.get("optional"), f"{component}: no value for the Secret key {ref['key']}"
        elif entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[entry["name"]] = release.namespace
        elif entry["valueFrom"].get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[entry["name"]] = "127.0.0.1"  # the process runs on this machine's loopback
        else:
            raise AssertionError(f"{component}: an environment entry the test cannot give: {entry}")
    return env


def chart_command(release: Release, component: str, *, port: int | None = None) -> list[str]:
    """The container's command, run from this checkout's virtualenv (the web process on a loopback port)."""
    [container] = release.deployment(component)["spec"]["template"]["spec"]["containers"]
    command = list(container["command"])
    if command[0] == "python":
        command[0] = sys.executable
    else:
        command[0] = str(VENV_BIN / command[0])
    if port is not None:
        command[command.index("0.0.0.0:8000")] = f"127.0.0.1:{port}"
    return command


@dataclass
class PortalProcess:
    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        base = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL", "TZ") if key in os.environ}
        # As the image sets them (Dockerfile).
        env = {
            **base,
            "HOME": str(self.log_path.parent),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - the chart's own command
                self.command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL to the process and its children (its own session): no chance to release anything."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM, as Kubernetes stops a pod; SIGKILL after `timeout`."""
        if not self.alive():
            return
        os.killpg(self.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(f"    {line}" for line in self.log().splitlines()[-lines:])

    def refusals(self) -> list[str]:
        return [line for line in self.log().splitlines() if FORBIDDEN.search(line)]


def wait_for_http(url: str, *, process: PortalProcess, timeout: float = 60) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - loopback
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert process.alive(), f"{process.name} exited:\n{process.tail()}"
        assert time.monotonic() < deadline, f"{url} did not answer in {timeout:.0f}s:\n{process.tail()}"
        time.sleep(0.3)
