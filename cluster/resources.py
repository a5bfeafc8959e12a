"""Typed wrappers over the calls the portal makes. Every function retries transient failures (cluster.errors)
and raises ClusterError for verdicts; "already there" and "already gone" are successes, so callers are
idempotent."""

import json
import logging
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from . import client
from .errors import with_retries
from .manifests import LABEL_MANAGED_BY, MANAGED_BY, render_priority_classes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    created: bool = False
    corrected: bool = False  # existed but differed from what the portal wants: replaced
    before: dict | list | None = None  # the compared part as it was in the cluster
    after: dict | list | None = None  # the compared part as the portal wants it


def _is(status: int, error: Exception) -> bool:
    cause = error.__cause__ if error.__cause__ is not None else error
    return isinstance(cause, ApiException) and cause.status == status


def ensure_namespace(manifest: dict) -> ApplyResult:
    core = client.core()
    name = manifest["metadata"]["name"]
    try:
        existing = with_retries(lambda: core.read_namespace(name))
    except Exception as error:
        if not _is(404, error):
            raise
        with_retries(lambda: core.create_namespace(manifest))
        return ApplyResult(created=True, after={"labels": manifest["metadata"]["labels"]})
    labels = existing.metadata.labels or {}
    wanted = manifest["metadata"]["labels"]
    current = {"labels": {key: labels.get(key) for key in wanted}}
    if current["labels"] != wanted:
        with_retries(lambda: core.patch_namespace(name, {"metadata": {"labels": wanted}}))
        return ApplyResult(corrected=True, before=current, after={"labels": wanted})
    return ApplyResult(before=current, after={"labels": wanted})


def _apply_namespaced(manifest: dict, *, read, create, replace, compare) -> ApplyResult:
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"]["namespace"]
    try:
        existing = with_retries(lambda: read(name, namespace))
    except Exception as error:
        if not _is(404, error):
            raise
        with_retries(lambda: create(namespace, manifest))
        return ApplyResult(created=True, after=compare(manifest))
    current = compare(existing)
    wanted = compare(manifest)
    if current == wanted:
        return ApplyResult(before=current, after=wanted)
    body = dict(manifest)
    body["metadata"] = {**manifest["metadata"], "resourceVersion": existing.metadata.resource_version}
    with_retries(lambda: replace(name, namespace, body))
    return ApplyResult(corrected=True, before=current, after=wanted)


def _spec(obj) -> dict:
    if isinstance(obj, dict):
        return obj["spec"]
    return client.api_client().sanitize_for_serialization(obj.spec)


def _normalise_quantities(values: dict | None) -> dict:
    from kubernetes.utils import parse_quantity

    return {key: str(parse_quantity(value)) for key, value in (values or {}).items()}


def apply_resource_quota(manifest: dict) -> ApplyResult:
    core = client.core()
    return _apply_namespaced(
        manifest,
        read=core.read_namespaced_resource_quota,
        create=core.create_namespaced_resource_quota,
        replace=core.replace_namespaced_resource_quota,
        compare=lambda obj: {"hard": _normalise_quantities(_spec(obj).get("hard"))},
    )


def apply_limit_range(manifest: dict) -> ApplyResult:
    core = client.core()

    def compare(obj):
        limits = _spec(obj).get("limits") or []
        return [
            {
                "type": item.get("type"),
                **{
                    key: _normalise_quantities(item.get(key))
                    for key in ("max", "min", "default", "defaultRequest")
                    if item.get(key)
                },
            }
            for item in limits
        ]

    return _apply_namespaced(
        manifest,
        read=core.read_namespaced_limit_range,
        create=core.create_namespaced_limit_range,
        replace=core.replace_namespaced_limit_range,
        compare=compare,
    )


def ensure_priority_classes() -> None:
    api = client.scheduling()
    for manifest in render_priority_classes():
        try:
            with_retries(lambda manifest=manifest: api.create_priority_class(manifest))
        except Exception as error:
            if not _is(409, error):
                raise


def create_job(manifest: dict) -> bool:
    """Create the Job; False when a Job of that name already exists (a retried submission)."""
    batch = client.batch()
    namespace = manifest["metadata"]["namespace"]
    try:
        with_retries(lambda: batch.create_namespaced_job(namespace, manifest))
    except Exception as error:
        if _is(409, error):
            return False
        raise
    return True


def read_job(namespace: str, name: str):
    """The Job, or None when it does not exist."""
    batch = client.batch()
    try:
        return with_retries(lambda: batch.read_namespaced_job(name, namespace))
    except Exception as error:
        if _is(404, error):
            return None
        raise


def delete_job(namespace: str, name: str) -> bool:
    """Delete the Job and its pods (background propagation). False when it was already gone."""
    batch = client.batch()
    try:
        with_retries(lambda: batch.delete_namespaced_job(name, namespace, propagation_policy="Background"))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def managed_job_pages(*, page_size: int = 500):
    """Every Job the portal labels as its own (`app.kubernetes.io/managed-by=reservoir`), in every namespace, as
    plain dicts, one page (a list) at a time."""
    batch = client.batch()
    token = None
    while True:
        kwargs = {
            "label_selector": f"{LABEL_MANAGED_BY}={MANAGED_BY}",
            "limit": page_size,
            "_preload_content": False,
            "_request_timeout": (5, 60),
        }
        if token:
            kwargs["_continue"] = token
        response = with_retries(lambda kwargs=kwargs: batch.list_job_for_all_namespaces(**kwargs))
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        yield body.get("items") or []
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return


def patch_job(namespace: str, name: str, patch: dict):
    batch = client.batch()
    return with_retries(lambda: batch.patch_namespaced_job(name, namespace, patch))


def pod_log_tail(namespace: str, pod_name: str, *, lines: int = 200) -> str:
    core = client.core()
    return with_retries(
        lambda: core.read_namespaced_pod_log(pod_name, namespace, tail_lines=lines, _request_timeout=10), attempts=2
    )


def events_for(namespace: str, kind: str, name: str) -> list:
    core = client.core()
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    result = with_retries(lambda: core.list_namespaced_event(namespace, field_selector=selector, _request_timeout=10))
    return list(result.items)


def list_nodes():
    return with_retries(lambda: client.core().list_node())


def patch_node_taints(name: str, taints: list[dict]) -> None:
    core = client.core()
    with_retries(lambda: core.patch_node(name, {"spec": {"taints": taints}}))


def list_scaling_objects() -> list[dict]:
    """PodDisruptionBudgets, HorizontalPodAutoscalers, Deployments and StatefulSets of every namespace, as plain
    dicts with their `kind` (read-only; for the PDB lint of `manage.py export_manifests --from-cluster`)."""
    from kubernetes import client as k8s

    api = client.api_client()
    lists = [
        ("PodDisruptionBudget", k8s.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces),
        ("HorizontalPodAutoscaler", k8s.AutoscalingV2Api(api).list_horizontal_pod_autoscaler_for_all_namespaces),
        ("Deployment", k8s.AppsV1Api(api).list_deployment_for_all_namespaces),
        ("StatefulSet", k8s.AppsV1Api(api).list_stateful_set_for_all_namespaces),
    ]
    objects = []
    for kind, list_all in lists:
        for item in with_retries(list_all).items:
            data = api.sanitize_for_serialization(item)
            data["kind"] = kind
            objects.append(data)
    return objects
