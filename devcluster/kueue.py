"""Kueue beside the local control plane: its CRDs, certificates, configuration, process and webhooks.

The idea: Kueue runs as one more process of the cluster (recorded in ``cluster.json`` like the others, so
``status``, ``down`` and ``restart_component("kueue")`` treat it alike), outside a pod. Its own files are read at
run time from the Go module cache the build left behind (``build.kueue_module_dir()``), never copied into the
repository. The order is what makes it safe:

1. CRDs are server-side applied and Kueue starts only once they are Established and served (started earlier it
   exits with "no matches for kind Workload").
2. The webhook serving pair (IP 127.0.0.1, signed by the cluster's CA) lives in the state directory; the metrics
   pair is read from a path hard-coded in Kueue (``/etc/kueue/metrics/certs``) that every cluster on the machine
   shares, so it is written only when missing or invalid.
3. The Mutating and Validating webhook configurations (the module's entries for batch/v1 Jobs and
   kueue.x-k8s.io objects, pointed at ``https://127.0.0.1:<port><path>``) are registered only once Kueue answers
   ``/readyz``, and deleted before it is stopped: with ``failurePolicy: Fail`` a webhook nobody answers blocks
   every Job create in the cluster.

While Kueue restarts (``restart_component("kueue")``) its webhooks stay registered: Job creates fail for those
seconds ("failed calling webhook ... connection refused") and the portal's submit task retries them. Removing
the webhooks instead would let a Job carrying ``kueue.x-k8s.io/queue-name`` start unsuspended, past its quota.
"""

from __future__ import annotations

import base64
import http.client
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml

from devcluster import build, certs
from devcluster.processes import ApiConnection, ProcessRecord, free_port, tail
from devcluster.tuning import TUNED, Tuning

if TYPE_CHECKING:
    from devcluster.launcher import Cluster

NAME = "kueue"  # the component's name in cluster.json, status and restart_component
NAMESPACE = "kueue-system"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Hard-coded in Kueue's cmd/kueue/main.go when its internal certificate management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Its visibility API server otherwise wants /visibility/tls.crt (hard-coded) and an aggregated APIService.
FEATURE_GATES = "VisibilityOnDemand=false"
# All-or-nothing start of multi-pod jobs: an admitted job whose pods are not all ready in time gives its quota back.
DEFAULT_PODS_READY_TIMEOUT = "5m"
# Requeue backoff of a gang evicted by that timeout (Kueue's defaults, written out).
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 3600
FIELD_MANAGER = "reservoir-devcluster"
# Kueue's log verbosity (zap's level: 0 = info, 2 = admission decisions); unset keeps Kueue's default.
LOG_LEVEL_VARIABLE = "RESERVOIR_KUEUE_LOG_LEVEL"
# How long Kueue must stay up after its first ready answer before its webhooks are registered.
STEADY_SECONDS = 1.0
WEBHOOK_API = "/apis/admissionregistration.k8s.io/v1"
# kind -> (resource, name): the names carry Kueue's usual "kueue-" prefix.
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", "kueue-mutating-webhook-configuration"),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", "kueue-validating-webhook-configuration"),
}
# Kinds the portal relies on; the pytest plugin checks them on a cluster it did not start.
REQUIRED_CRDS = tuple(
    f"{plural}.{GROUP}" for plural in ("clusterqueues", "localqueues", "resourceflavors", "workloads")
)

_DURATION = re.compile(r"^(\d+(\.\d+)?(h|m|s|ms))+$")


class KueueError(RuntimeError):
    """Kueue could not be installed, started or reached; the message says which step and why."""


# -- what gets written (pure) ------------------------------------------------------------------------------------------
def check_duration(text: str) -> str:
    """A Go duration such as ``5m`` or ``90s`` (what Kueue's configuration accepts), else KueueError."""
    if not _DURATION.match(text) or not any(char != "0" for char in re.sub(r"\D", "", text)):
        raise KueueError(f"not a positive Go duration (e.g. 5m, 90s, 1h30m): {text!r}")
    return text


def pods_ready_config(timeout: str) -> dict[str, Any]:
    """Kueue's waitForPodsReady: all-or-nothing start of multi-pod jobs (gangs). An admitted job whose pods are not
    all ready within ``timeout`` is evicted (its pods deleted, its quota freed) and requeued after an exponential
    backoff counted from the eviction: about REQUEUE_BACKOFF_BASE_SECONDS × 2^(n−1) plus jitter, at most
    REQUEUE_BACKOFF_MAX_SECONDS, endlessly (no backoffLimitCount). ``blockAdmission`` stays off: other jobs are
    admitted meanwhile (one stuck gang does not stop its queue)."""
    return {
        "timeout": check_duration(timeout),
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": REQUEUE_BACKOFF_BASE_SECONDS,
            "backoffMaxSeconds": REQUEUE_BACKOFF_MAX_SECONDS,
        },
    }


def configuration(
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    cert_dir: Path,
    pods_ready_timeout: str,
    tuning: Tuning = TUNED,
) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a process on loopback outside a pod."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        # As the controller-manager and scheduler of the devcluster (devcluster/tuning.py).
        "clientConnection": {"qps": tuning.kueue_qps, "burst": tuning.kueue_burst},
        # Workers per controller (without this section controller-runtime runs one reconcile at a time).
        "controller": {"groupKindConcurrency": dict(tuning.kueue_concurrency)},
        # Present = enabled (v1beta2 has no `enable` field): a job whose pods are not all ready `timeout` after its
        # admission is evicted, gives its quota back and is requeued after a backoff.
        "waitForPodsReady": pods_ready_config(pods_ready_timeout),
        "integrations": {"frameworks": ["batch/job"]},
    }


def _is_for_jobs_or_kueue(webhook: dict[str, Any]) -> bool:
    rules = webhook.get("rules") or []

    def kept(rule: dict[str, Any]) -> bool:
        groups = rule.get("apiGroups") or []
        if groups == [GROUP]:
            return True
        return groups == ["batch"] and "v1" in (rule.get("apiVersions") or []) and "jobs" in rule.get("resources", [])

    return bool(rules) and all(kept(rule) for rule in rules)


def webhook_configurations(manifests: str, *, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations reduced to the entries for batch/v1 Jobs and kueue.x-k8s.io objects,
    each calling ``https://127.0.0.1:<port><its path>`` and trusting ``ca_bundle`` (PEM)."""
    result = []
    for document in yaml.safe_load_all(manifests):
        if not document or document.get("kind") not in WEBHOOK_CONFIGURATIONS:
            continue
        webhooks = []
        for webhook in document.get("webhooks") or []:
            if not _is_for_jobs_or_kueue(webhook):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook = dict(webhook)
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            webhooks.append(webhook)
        resource, name = WEBHOOK_CONFIGURATIONS[document["kind"]]
        result.append(
            {
                "apiVersion": document["apiVersion"],
                "kind": document["kind"],
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "kueue"}},
                "webhooks": webhooks,
            }
        )
    kinds = {document["kind"] for document in result}
    names = {webhook["name"] for document in result for webhook in document["webhooks"]}
    if kinds != set(WEBHOOK_CONFIGURATIONS) or not {"mjob.kb.io", "vjob.kb.io"} <= names:
        raise KueueError("Kueue's webhook manifests hold no Mutating and Validating entries for batch/v1 Jobs")
    return result


def crd_documents(module_dir: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of Kueue's module (config/components/crd/bases/)."""
    bases = module_dir / "config" / "components" / "crd" / "bases"
    documents = []
    for path in sorted(bases.glob("*.yaml")):
        documents += [
            doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "CustomResourceDefinition"
        ]
    if not documents:
        raise KueueError(f"no CustomResourceDefinitions in {bases}; run: python -m devcluster build")
    return documents


# -- what gets done through the API ------------------------------------------------------------------------------------
def _apply(api: ApiConnection, path: str, body: dict[str, Any]) -> None:
    """Server-side apply (create or update; our field manager wins conflicts)."""
    query = f"?fieldManager={quote(FIELD_MANAGER)}&force=true"
    code, answer = api.request("PATCH", path + query, body, content_type="application/apply-patch+yaml")
    if code not in (200, 201):
        raise KueueError(f"server-side apply of {path} failed: HTTP {code}: {str(answer)[:500]}")


def apply_crds(api: ApiConnection, documents: list[dict[str, Any]]) -> None:
    for document in documents:
        name = document["metadata"]["name"]
        _apply(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", document)


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(item.get("type") == "Established" and item.get("status") == "True" for item in conditions)


def wait_crds_served(api: ApiConnection, documents: list[dict[str, Any]], timeout: float = 60.0) -> None:
    """Wait until every CRD is Established and each of its served versions answers a list."""
    pending = {document["metadata"]["name"]: document for document in documents}
    deadline = time.monotonic() + timeout
    problem = ""
    while pending:
        for name, document in list(pending.items()):
            code, crd = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if code != 200 or not _established(crd):
                problem = f"{name} not Established yet"
                continue
            group, plural = document["spec"]["group"], document["spec"]["names"]["plural"]
            served = [version["name"] for version in document["spec"]["versions"] if version.get("served")]
            answers = [api.request("GET", f"/apis/{group}/{version}/{plural}?limit=1")[0] for version in served]
            if all(code == 200 for code in answers):
                del pending[name]
            else:
                problem = f"{plural}.{group} not served yet (HTTP {answers})"
        if not pending:
            return
        if time.monotonic() > deadline:
            raise KueueError(f"Kueue's CRDs not served after {timeout:.0f}s: {problem}")
        time.sleep(0.2)


def ensure_namespace(api: ApiConnection) -> None:
    code, answer = api.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    if code not in (201, 409):
        raise KueueError(f"cannot create namespace {NAMESPACE}: HTTP {code}: {answer}")


def register_webhooks(api: ApiConnection, configurations: list[dict[str, Any]]) -> None:
    for document in configurations:
        resource, name = WEBHOOK_CONFIGURATIONS[document["kind"]]
        _apply(api, f"{WEBHOOK_API}/{resource}/{name}", document)


def delete_webhooks(api: ApiConnection) -> list[str]:
    """Delete both webhook configurations; returns the names that were there."""
    deleted = []
    for resource, name in WEBHOOK_CONFIGURATIONS.values():
        code, answer = api.request("DELETE", f"{WEBHOOK_API}/{resource}/{name}")
        if code in (200, 202):
            deleted.append(name)
        elif code != 404:
            raise KueueError(f"cannot delete {resource}/{name}: HTTP {code}: {answer}")
    return deleted


def webhooks_problem(api: ApiConnection, port: int) -> str | None:
    """None when both webhook configurations are registered and every entry calls Kueue on ``port``."""
    prefix = f"https://127.0.0.1:{port}/"
    for resource, name in WEBHOOK_CONFIGURATIONS.values():
        code, answer = api.request("GET", f"{WEBHOOK_API}/{resource}/{name}")
        if code == 404:
            return f"{resource}/{name} not registered"
        if code != 200:
            return f"cannot read {resource}/{name}: HTTP {code}"
        webhooks = answer.get("webhooks") or []
        if not webhooks or any(not (w.get("clientConfig", {}).get("url") or "").startswith(prefix) for w in webhooks):
            return f"{resource}/{name} does not call Kueue on port {port}"
    return None


def _inotify_hint() -> str:
    try:
        limit = Path("/proc/sys/fs/inotify/max_user_instances").read_text().strip()
    except OSError:
        limit = "?"
    return (
        "Kueue could not watch its certificate files: this user's inotify instances are used up "
        f"(fs.inotify.max_user_instances = {limit}; every local cluster's components hold a few). Stop clusters "
        "that are not needed (python -m devcluster down --state-dir DIR) or raise the limit as root: "
        "sysctl -w fs.inotify.max_user_instances=1024"
    )


# -- the process beside a cluster --------------------------------------------------------------------------------------
class Kueue:
    """Kueue's process beside one local cluster: started by ``Cluster.up``, stopped by ``Cluster.down``.

    Its record sits in the cluster's ``cluster.json`` among the other processes (name ``kueue``, port = the webhook
    port, health = ``/readyz``), with its ports and settings under the ``kueue`` key."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.directory = cluster.state_dir / "kueue"

    @property
    def config_path(self) -> Path:
        return self.directory / "config.yaml"

    @property
    def cert_dir(self) -> Path:
        return self.directory / "webhook-certs"

    def record(self, state: dict[str, Any] | None = None) -> ProcessRecord | None:
        return next((record for record in self.cluster.records(state) if record.name == NAME), None)

    def settings(self, state: dict[str, Any] | None = None) -> dict[str, Any]:
        state = self.cluster._read_state() if state is None else state
        return state.get("kueue") or {}

    def health_problem(self, record: ProcessRecord) -> str | None:
        """Beyond /readyz: None when both webhook configurations call this Kueue."""
        try:
            return webhooks_problem(self.cluster.api(), record.port)
        except (OSError, http.client.HTTPException) as error:
            return f"cannot check the webhooks: {type(error).__name__}: {error}"

    # -- start -----------------------------------------------------------------------------------------------------
    def apply_crds(self) -> list[dict[str, Any]]:
        """Server-side apply Kueue's CRDs (the API server takes seconds over the 670 KB Workload CRD and its
        validation rules, so ``up`` does this while the other components start). Returns them."""
        if not build.kueue_files_present():
            raise KueueError(
                f"Kueue's module files are missing in {build.kueue_module_dir()}; run: python -m devcluster build"
            )
        documents = crd_documents(build.kueue_module_dir())
        apply_crds(self.cluster.api(), documents)
        self.cluster.progress(f"applied {len(documents)} Kueue CRDs")
        return documents

    def start(
        self, binaries: Path, *, pods_ready_timeout: str, crds: list[dict[str, Any]] | None = None
    ) -> ProcessRecord:
        """Wait until the CRDs (applied now unless ``crds`` says they were) are served, write namespace,
        certificates and configuration, spawn Kueue and record it. Does not wait for it: ``finish_start`` does."""
        check_duration(pods_ready_timeout)
        documents = crds if crds is not None else self.apply_crds()
        api = self.cluster.api()
        wait_crds_served(api, documents)
        ensure_namespace(api)
        self.directory.mkdir(parents=True, exist_ok=True)
        certs.ensure_serving_pair(self.cluster.pki, self.cert_dir, common_name="kueue-webhook")
        try:
            if certs.ensure_shared_serving_pair(METRICS_CERT_DIR, common_name="kueue-metrics"):
                self.cluster.progress(f"wrote Kueue's metrics certificate to {METRICS_CERT_DIR}")
        except PermissionError as error:
            raise KueueError(
                f"Kueue reads its metrics certificate from {METRICS_CERT_DIR} (a path hard-coded in Kueue) and "
                f"this user cannot write there ({error}); create that directory writable for this user, or run as root"
            ) from error
        ports = {"webhook_port": free_port(), "health_port": free_port(), "metrics_port": free_port()}
        config = configuration(
            health_port=ports["health_port"],
            metrics_port=ports["metrics_port"],
            webhook_port=ports["webhook_port"],
            cert_dir=self.cert_dir,
            pods_ready_timeout=pods_ready_timeout,
            tuning=self.cluster.tuning,
        )
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            str(binaries / "kueue"),
            f"--config={self.config_path}",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--feature-gates={FEATURE_GATES}",
        ]
        log_level = os.environ.get(LOG_LEVEL_VARIABLE, "").strip()
        if log_level:
            # 2 records Kueue's admission decisions ("Workload successfully admitted and assigned flavors", why a
            # workload was not admitted): the test cluster runs at 2, so a failed cluster test's log says why.
            argv.append(f"--zap-log-level={int(log_level)}")
        record = self.cluster._spawn(
            NAME, argv, ports["webhook_port"], f"http://127.0.0.1:{ports['health_port']}/readyz"
        )
        state = self.cluster._read_state()
        state["processes"] = [entry for entry in state.get("processes", []) if entry["name"] != NAME]
        state["processes"].append(record.__dict__)
        state["kueue"] = {**ports, "pods_ready_timeout": pods_ready_timeout, "version": build.versions.KUEUE_VERSION}
        self.cluster._write_state(state)
        self.cluster.progress(f"kueue {build.versions.KUEUE_VERSION} starting (webhook port {ports['webhook_port']})")
        return record

    def finish_start(self, record: ProcessRecord, *, timeout: float = 120.0) -> None:
        """Wait for /readyz and for Kueue to stay up a moment, then register the webhooks (never before: a webhook
        nobody answers blocks every Job create)."""
        try:
            self.cluster._wait_healthy([record], timeout=timeout)
            # Kueue answers /readyz before its manager has started every watcher, and can still exit then (seen:
            # "too many open files" 0.1 s after a ready answer).
            deadline = time.monotonic() + STEADY_SECONDS
            while time.monotonic() < deadline:
                if record.process() is None:
                    raise KueueError(
                        f"kueue exited right after it answered /readyz; last lines of {record.log}:\n"
                        f"{tail(Path(record.log))}"
                    )
                time.sleep(0.1)
        except Exception as error:
            if "too many open files" in tail(Path(record.log), lines=10):
                raise KueueError(f"{error}\n{_inotify_hint()}") from error
            raise
        self.register_webhooks(record)

    def register_webhooks(self, record: ProcessRecord) -> None:
        manifests = build.kueue_module_dir() / "config" / "components" / "webhook" / "manifests.yaml"
        configurations = webhook_configurations(
            manifests.read_text(), port=record.port, ca_bundle=self.cluster.pki.ca_cert.read_bytes()
        )
        register_webhooks(self.cluster.api(), configurations)
        self.cluster.progress(f"kueue webhooks registered (https://127.0.0.1:{record.port})")

    def ensure(self, binaries: Callable[[], Path], *, pods_ready_timeout: str | None) -> bool:
        """Make Kueue run healthy with its webhooks on a control plane that is up: leave a healthy one alone
        (registering missing webhooks), restart one with other settings or that does not become ready, start a
        missing one. ``pods_ready_timeout`` None keeps what runs. Returns True when it (re)started Kueue."""
        record = self.record()
        running = self.settings().get("pods_ready_timeout")
        wanted = pods_ready_timeout or running or DEFAULT_PODS_READY_TIMEOUT
        if record is not None and record.process() is not None and running == wanted:
            try:
                self.finish_start(record, timeout=60)
                return False
            except Exception as error:  # noqa: BLE001 - any failure: start it afresh below
                self.cluster.progress(f"kueue not healthy ({str(error).splitlines()[0]}); restarting it")
        if record is not None:
            self.stop()
        self.finish_start(self.start(binaries(), pods_ready_timeout=wanted))
        return True

    # -- stop ------------------------------------------------------------------------------------------------------
    def remove_webhooks(self) -> list[str]:
        """Delete the webhook configurations if the API server answers (before Kueue stops)."""
        try:
            deleted = delete_webhooks(self.cluster.api())
        except (OSError, http.client.HTTPException, KueueError) as error:
            self.cluster.progress(f"could not delete Kueue's webhooks ({type(error).__name__}: {error})")
            return []
        if deleted:
            self.cluster.progress(f"deleted {', '.join(deleted)}")
        return deleted

    def stop(self, *, timeout: float = 20.0) -> list[str]:
        """Delete the webhooks, then stop Kueue and forget its record. Returns the names it stopped."""
        state = self.cluster._read_state()
        record = self.record(state)
        if state.get("apiserver_port"):
            self.remove_webhooks()
        stopped = self.cluster._stop([record], timeout) if record is not None else []
        state = self.cluster._read_state()
        state["processes"] = [entry for entry in state.get("processes", []) if entry["name"] != NAME]
        state.pop("kueue", None)
        self.cluster._write_state(state)
        return stopped
