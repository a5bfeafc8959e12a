"""A DCGM-format exporter for the fake GPUs of the local cluster.

NVIDIA's dcgm-exporter runs on every GPU node and serves one gauge per GPU and field, labelled with the GPU
(``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``) and, while a pod holds that GPU, with the pod
(``container``, ``namespace``, ``pod``). This one serves the same names and labels for every node of the local
cluster that has ``nvidia.com/gpu`` capacity, from what the API server says:

- each Running pod on a node is given as many GPU indices as it requests, lowest free first, and keeps them for
  as long as it runs (the device plugin's assignment, made sticky here because nothing else records it);
- a GPU held by a pod is busy: utilisation around ``BUSY_UTIL`` percent (a per-GPU wiggle keeps series apart),
  memory and power to match; the pod annotation ``dcgm.reservoir.dev/gpu-util`` sets its utilisation (e.g. "2"
  for a job that holds GPUs and does nothing), ``dcgm.reservoir.dev/memory-used-percent`` its memory;
- a free GPU idles near zero;
- a hot GPU reports ``hot_temperature`` °C: the node annotation ``dcgm.reservoir.dev/hot-gpus`` ("3" or "0,3")
  or ``--hot NODE/GPU`` on the command line picks it, ``dcgm.reservoir.dev/hot-temperature`` sets the degrees.

``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` is a profiling field that Tesla T4s do not expose; like the real exporter,
this one serves it only for the other models.

Run: ``python -m devcluster.dcgm_exporter --kubeconfig FILE --port 9400``; ``/metrics`` and ``/healthz``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import http.client
import json
import os
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
ANNOTATION_UTIL = "dcgm.reservoir.dev/gpu-util"
ANNOTATION_MEMORY = "dcgm.reservoir.dev/memory-used-percent"
ANNOTATION_HOT_GPUS = "dcgm.reservoir.dev/hot-gpus"
ANNOTATION_HOT_TEMPERATURE = "dcgm.reservoir.dev/hot-temperature"
DRIVER_VERSION = "550.90.07"
BUSY_UTIL = 72.0
IDLE_UTIL = 0.0
HOT_TEMPERATURE = 91.0

# (framebuffer MiB, idle watts, max watts, profiling fields) per model; unknown models get the A100's shape.
MODELS = {
    "t4": (15360, 10.0, 70.0, False),
    "a100": (81920, 55.0, 400.0, True),
    "a800": (81920, 55.0, 400.0, True),
    "h100": (81559, 70.0, 700.0, True),
}

METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active (in %)."),
)


def model_shape(model: str) -> tuple[int, float, float, bool]:
    lowered = model.lower()
    for key, shape in MODELS.items():
        if key in lowered:
            return shape
    return MODELS["a100"]


def wiggle(*parts: object, spread: float) -> float:
    """A stable offset in [-spread, spread] for one GPU (series stay apart, and the same from scrape to scrape)."""
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return (digest[0] / 255.0 * 2 - 1) * spread


def gpu_uuid(node: str, index: int) -> str:
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _number(value: str | None, default: float, low: float = 0.0, high: float = 100.0) -> float:
    try:
        return min(high, max(low, float(value))) if value not in (None, "") else default
    except ValueError:
        return default


def _gpu_count(value) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


@dataclass
class PodOnGpu:
    namespace: str
    name: str
    container: str
    util: float | None
    memory_percent: float | None


@dataclass
class GpuState:
    node: str
    index: int
    model: str
    hot_temperature: float | None
    holder: PodOnGpu | None


@dataclass
class Assignments:
    """Which pod (by uid) holds which GPU indices on which node; kept while the pod runs."""

    by_node: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def assign(self, node: str, capacity: int, running: dict[str, int]) -> dict[str, list[int]]:
        """Keep the indices of pods still running, give new pods the lowest free ones (uids in a stable order)."""
        current = {uid: gpus for uid, gpus in self.by_node.get(node, {}).items() if uid in running}
        taken = {index for gpus in current.values() for index in gpus}
        for uid in sorted(running):
            if uid in current:
                continue
            free = [index for index in range(capacity) if index not in taken]
            wanted = running[uid]
            if wanted > len(free):  # more than the node has: nothing real would run it
                continue
            current[uid] = free[:wanted]
            taken.update(current[uid])
        self.by_node[node] = current
        return current


def gpu_states(nodes: list[dict], pods: list[dict], assignments: Assignments, hot: set[tuple[str, int]]) -> list:
    """Every GPU of every node with GPU capacity, and the pod that holds it (pure: API objects in, states out)."""
    running_by_node: dict[str, dict[str, dict]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") != "Running" or not spec.get("nodeName"):
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        running_by_node.setdefault(spec["nodeName"], {})[pod["metadata"]["uid"]] = pod
    states = []
    for node in sorted(nodes, key=lambda item: item["metadata"]["name"]):
        name = node["metadata"]["name"]
        capacity = _gpu_count(((node.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE))
        if capacity <= 0:
            continue
        labels = node["metadata"].get("labels") or {}
        annotations = node["metadata"].get("annotations") or {}
        model = labels.get(GPU_PRODUCT_LABEL, "NVIDIA-A100-SXM4-80GB")
        hot_indices = {index for (hot_node, index) in hot if hot_node == name}
        for part in (annotations.get(ANNOTATION_HOT_GPUS) or "").split(","):
            if part.strip().isdigit():
                hot_indices.add(int(part.strip()))
        hot_temperature = _number(annotations.get(ANNOTATION_HOT_TEMPERATURE), HOT_TEMPERATURE, 0, 130)
        pods_here = running_by_node.get(name, {})
        wanted = {uid: _pod_gpus(pod) for uid, pod in pods_here.items()}
        held = assignments.assign(name, capacity, {uid: count for uid, count in wanted.items() if count > 0})
        holder_of: dict[int, PodOnGpu] = {}
        for uid, indices in held.items():
            pod = pods_here[uid]
            pod_annotations = pod["metadata"].get("annotations") or {}
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            gpu_container = next((c for c in containers if _container_gpus(c) > 0), containers[0])
            holder = PodOnGpu(
                namespace=pod["metadata"].get("namespace", ""),
                name=pod["metadata"]["name"],
                container=gpu_container.get("name", ""),
                util=_number(pod_annotations.get(ANNOTATION_UTIL), None)
                if ANNOTATION_UTIL in pod_annotations
                else None,
                memory_percent=(
                    _number(pod_annotations.get(ANNOTATION_MEMORY), None)
                    if ANNOTATION_MEMORY in pod_annotations
                    else None
                ),
            )
            for index in indices:
                holder_of[index] = holder
        for index in range(capacity):
            states.append(
                GpuState(
                    node=name,
                    index=index,
                    model=model,
                    hot_temperature=hot_temperature if index in hot_indices else None,
                    holder=holder_of.get(index),
                )
            )
    return states


def _container_gpus(container: dict) -> int:
    resources = container.get("resources") or {}
    return _gpu_count(
        (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)
    )


def _pod_gpus(pod: dict) -> int:
    return sum(_container_gpus(container) for container in (pod.get("spec") or {}).get("containers") or [])


def readings(state: GpuState) -> dict[str, float]:
    """The field values of one GPU: busy when a pod holds it, near zero when free, hot when told so."""
    framebuffer, idle_watts, max_watts, profiling = model_shape(state.model)
    if state.holder is not None:
        util = (
            state.holder.util
            if state.holder.util is not None
            else BUSY_UTIL + wiggle(state.node, state.index, spread=6)
        )
        memory_percent = state.holder.memory_percent
        if memory_percent is None:
            memory_percent = 20.0 + util * 0.6
    else:
        util = IDLE_UTIL
        memory_percent = 0.0
    util = round(min(100.0, max(0.0, util)), 1)
    used = round(framebuffer * memory_percent / 100.0)
    temperature = 34.0 + util * 0.35 + wiggle(state.node, state.index, "t", spread=2)
    if state.hot_temperature is not None:
        temperature = state.hot_temperature
    values = {
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.55, 1),
        "DCGM_FI_DEV_FB_USED": float(used),
        "DCGM_FI_DEV_FB_FREE": float(framebuffer - used),
        "DCGM_FI_DEV_GPU_TEMP": round(temperature),
        "DCGM_FI_DEV_POWER_USAGE": round(idle_watts + (max_watts - idle_watts) * util / 100.0, 3),
    }
    if profiling:
        values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = round(util / 100.0 * 0.95, 4)
    return values


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(states: list[GpuState]) -> str:
    """Prometheus text format, one block per field, with the real exporter's label names."""
    rows = []
    for state in states:
        labels = {
            "gpu": str(state.index),
            "UUID": gpu_uuid(state.node, state.index),
            "device": f"nvidia{state.index}",
            "modelName": state.model.replace("-", " "),
            "Hostname": state.node,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
        }
        if state.holder is not None:
            labels.update(container=state.holder.container, namespace=state.holder.namespace, pod=state.holder.name)
        text = ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())
        rows.append((text, readings(state)))
    lines = []
    for metric, help_text in METRICS:
        block = [f"{metric}{{{labels}}} {values[metric]:g}" for labels, values in rows if metric in values]
        if not block:
            continue
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} gauge")
        lines.extend(block)
    return "\n".join(lines) + "\n"


class KubeReader:
    """Lists nodes and Running pods through the admin credentials of a kubeconfig (client certificate)."""

    def __init__(self, kubeconfig: Path, timeout: float = 10.0):
        config = yaml.safe_load(kubeconfig.read_text())
        context_name = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        url = urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.timeout = timeout
        self.context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        with tempfile.TemporaryDirectory() as directory:  # ssl loads a client certificate from files only
            cert, key = Path(directory) / "client.crt", Path(directory) / "client.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            key.chmod(0o600)
            self.context.load_cert_chain(str(cert), str(key))
        self._local = threading.local()

    def get(self, path: str) -> dict:
        for attempt in range(2):
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = http.client.HTTPSConnection(
                    self.host, self.port, context=self.context, timeout=self.timeout
                )
                self._local.connection = connection
            try:
                connection.request("GET", path, headers={"Accept": "application/json"})
                response = connection.getresponse()
                body = response.read()
                break
            except (OSError, http.client.HTTPException):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
        if response.status != 200:
            raise OSError(f"GET {path}: HTTP {response.status}: {body[:200]!r}")
        return json.loads(body)

    def nodes_and_pods(self) -> tuple[list[dict], list[dict]]:
        nodes = self.get("/api/v1/nodes").get("items", [])
        pods = self.get("/api/v1/pods?fieldSelector=status.phase%3DRunning").get("items", [])
        return nodes, pods


class Exporter:
    """Renders /metrics from the API server, at most once per `refresh` seconds (scrapes in between share it)."""

    def __init__(self, reader: KubeReader, hot: set[tuple[str, int]], refresh: float = 1.0):
        self.reader = reader
        self.hot = hot
        self.refresh = refresh
        self.assignments = Assignments()
        self._lock = threading.Lock()
        self._rendered = ""
        self._rendered_at = 0.0

    def metrics(self) -> str:
        with self._lock:
            if time.monotonic() - self._rendered_at >= self.refresh:
                nodes, pods = self.reader.nodes_and_pods()
                self._rendered = render(gpu_states(nodes, pods, self.assignments, self.hot))
                self._rendered_at = time.monotonic()
            return self._rendered


def make_handler(exporter: Exporter):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?")[0] == "/healthz":
                self._reply(200, "ok\n", "text/plain")
                return
            if self.path.split("?")[0] != "/metrics":
                self._reply(404, "not found\n", "text/plain")
                return
            try:
                body = exporter.metrics()
            except (OSError, ValueError) as error:
                self._reply(503, f"cannot read the cluster: {error}\n", "text/plain")
                return
            self._reply(200, body, "text/plain; version=0.0.4; charset=utf-8")

        def _reply(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature
            pass

    return Handler


def parse_hot(values: list[str]) -> set[tuple[str, int]]:
    hot = set()
    for value in values:
        node, _, index = value.rpartition("/")
        if not node or not index.isdigit():
            raise argparse.ArgumentTypeError(f"--hot wants NODE/GPU, e.g. gpu-node-10/3, not {value!r}")
        hot.add((node, int(index)))
    return hot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.dcgm_exporter", description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG"), required=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between reads of the API server")
    parser.add_argument("--hot", action="append", default=[], help="NODE/GPU that runs hot (repeatable)")
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error("--kubeconfig (or KUBECONFIG) is required")
    exporter = Exporter(KubeReader(args.kubeconfig), parse_hot(args.hot), refresh=args.refresh)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(exporter))
    server.daemon_threads = True
    print(f"dcgm exporter on http://{args.host}:{args.port}/metrics", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
