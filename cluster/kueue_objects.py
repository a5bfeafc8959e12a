"""Kueue's custom objects (kueue.x-k8s.io/v1beta2) in the cluster: list, read, create, replace, delete and apply
the objects `cluster/kueue.py` renders. Transient failures are retried as in `cluster.resources`; "already there"
and "already gone" are successes. A replace that meets a conflict (409: written since it was read) reads the object
again and replaces it once more: that is optimistic concurrency, not a retry of a transient failure."""

import time

from . import client
from .errors import TransientClusterError, with_retries
from .kueue import KINDS, KUEUE_GROUP, KUEUE_VERSION
from .labels import LABEL_MANAGED_BY, MANAGED_BY
from .resources import ApplyResult, _is, nudge_job

# --- Kueue's custom objects (kueue.x-k8s.io/v1beta2) -------------------------------------------------------------

# Spec fields that cannot change in place: an object whose field differs is deleted and created again.
IMMUTABLE_FIELDS = {"LocalQueue": ("clusterQueue",)}
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit"})
REPLACE_ATTEMPTS = 3
# Writes name every field exactly as the CRD does: an unknown field is an error, never silently dropped.
STRICT = "Strict"


def _normalise_kueue(value):
    """Quantities compared by value ("8", 8 and "8.0" are one quantity), everything else as it is."""
    from kubernetes.utils import parse_quantity

    if isinstance(value, dict):
        return {
            key: str(parse_quantity(item)) if key in QUANTITY_FIELDS else _normalise_kueue(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_normalise_kueue(item) for item in value]
    return value


def kueue_compared(obj: dict, wanted: dict) -> dict:
    """The part of a Kueue object the portal decides: its own labels, and the spec (or a priority class's value
    and description), with quantities normalised."""
    labels = obj["metadata"].get("labels") or {}
    compared = {"labels": {key: labels.get(key) for key in wanted["metadata"]["labels"]}}
    if wanted["kind"] == "WorkloadPriorityClass":
        compared["value"] = obj.get("value")
        compared["description"] = obj.get("description", "")
    else:
        compared["spec"] = _normalise_kueue(obj.get("spec") or {})
    return compared


def list_kueue_objects(kind: str) -> list[dict]:
    """Every object of `kind` that carries the portal's label (LocalQueues of every namespace)."""
    plural, _namespaced = KINDS[kind]
    api = client.custom_objects()
    selector = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    result = with_retries(
        lambda: api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, label_selector=selector)
    )
    return list(result.get("items") or [])


def read_kueue_object(kind: str, name: str, namespace: str | None = None) -> dict | None:
    """The object, or None when it does not exist."""
    plural, namespaced = KINDS[kind]
    api = client.custom_objects()
    try:
        if namespaced:
            return with_retries(
                lambda: api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name)
            )
        return with_retries(lambda: api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name))
    except Exception as error:
        if _is(404, error):
            return None
        raise


def create_kueue_object(manifest: dict) -> bool:
    """Create the object; False when one of that name already exists."""
    plural, namespaced = KINDS[manifest["kind"]]
    api = client.custom_objects()
    namespace = manifest["metadata"].get("namespace")
    try:
        if namespaced:
            with_retries(
                lambda: api.create_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, manifest, field_validation=STRICT
                )
            )
        else:
            with_retries(
                lambda: api.create_cluster_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, plural, manifest, field_validation=STRICT
                )
            )
    except Exception as error:
        if _is(409, error):
            return False
        raise
    return True


def replace_kueue_object(manifest: dict, existing: dict) -> None:
    """Replace `existing` with `manifest`, at `existing`'s resourceVersion (a conflict is raised, not forced).
    Finalizers, annotations and labels the portal does not set are kept."""
    plural, namespaced = KINDS[manifest["kind"]]
    api = client.custom_objects()
    metadata = existing["metadata"]
    body = dict(manifest)
    body["metadata"] = {
        **{key: metadata[key] for key in ("finalizers", "annotations", "ownerReferences") if metadata.get(key)},
        **manifest["metadata"],
        "labels": {**(metadata.get("labels") or {}), **manifest["metadata"]["labels"]},
        "resourceVersion": metadata["resourceVersion"],
    }
    name = manifest["metadata"]["name"]
    if namespaced:
        namespace = manifest["metadata"]["namespace"]
        with_retries(
            lambda: api.replace_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name, body, field_validation=STRICT
            )
        )
    else:
        with_retries(
            lambda: api.replace_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, plural, name, body, field_validation=STRICT
            )
        )


def delete_kueue_object(kind: str, name: str, namespace: str | None = None) -> bool:
    """Delete the object; False when it was already gone. (Kueue's own finalizers may keep a flavor or a cluster
    queue until nothing uses it any more.)"""
    plural, namespaced = KINDS[kind]
    api = client.custom_objects()
    try:
        if namespaced:
            with_retries(
                lambda: api.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name)
            )
        else:
            with_retries(lambda: api.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def annotate_kueue_object(kind: str, name: str, annotations: dict[str, str], namespace: str | None = None) -> bool:
    """Set annotations on the object (a merge patch that touches nothing else); False when it is gone."""
    plural, namespaced = KINDS[kind]
    api = client.custom_objects()
    body = {"metadata": {"annotations": annotations}}
    try:
        if namespaced:
            with_retries(
                lambda: api.patch_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name, body)
            )
        else:
            with_retries(lambda: api.patch_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name, body))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def apply_kueue_object(manifest: dict, existing: dict | None = None) -> ApplyResult:
    """Make the cluster hold `manifest`: create it when missing, replace it when the part the portal decides
    differs (`kueue_compared`), leave it when equal. `existing` is the object as listed, when the caller has it.

    A replace that meets a newer resourceVersion (Kueue writes a queue's status all the time) reads the object
    again and retries; an object whose immutable fields differ is deleted and created again."""
    kind = manifest["kind"]
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace")
    wanted = kueue_compared(manifest, manifest)
    for attempt in range(REPLACE_ATTEMPTS):
        if existing is None:
            existing = read_kueue_object(kind, name, namespace)
        if existing is None:
            if create_kueue_object(manifest):
                return ApplyResult(created=True, after=wanted)
            continue  # created meanwhile by someone else: compare with it
        current = kueue_compared(existing, manifest)
        if current == wanted:
            return ApplyResult(before=current, after=wanted)
        immutable = IMMUTABLE_FIELDS.get(kind, ())
        if any((existing.get("spec") or {}).get(field) != manifest["spec"].get(field) for field in immutable):
            delete_kueue_object(kind, name, namespace)
            _wait_gone(kind, name, namespace)
            create_kueue_object(manifest)
            return ApplyResult(corrected=True, before=current, after=wanted)
        try:
            replace_kueue_object(manifest, existing)
        except Exception as error:
            if not _is(409, error) or attempt == REPLACE_ATTEMPTS - 1:
                raise
            existing = None  # someone wrote it since we read it: read again
            continue
        return ApplyResult(corrected=True, before=current, after=wanted)
    raise AssertionError("unreachable")


def _wait_gone(kind: str, name: str, namespace: str | None, *, timeout: float = 10.0) -> None:
    """Wait (briefly) until a deleted object is gone, so that it can be created again under its name."""
    deadline = time.monotonic() + timeout
    while read_kueue_object(kind, name, namespace) is not None:
        if time.monotonic() > deadline:
            raise TransientClusterError(f"{kind} {name} is still being deleted")
        time.sleep(0.2)


# --- the budget's AdmissionCheck: the portal is its controller ----------------------------------------------------


def mark_admission_check_active(name: str, *, at: str) -> bool:
    """Set the AdmissionCheck's `Active` condition to True (its controller, the portal, answers for it): until then
    Kueue counts every ClusterQueue that names the check as inactive. False when the check is gone."""
    api = client.custom_objects()
    body = {
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "The portal's budget controller answers this check",
                    "lastTransitionTime": at,
                }
            ]
        }
    }
    try:
        with_retries(
            lambda: api.patch_cluster_custom_object_status(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", name, body)
        )
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def admission_check_active(obj: dict) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def list_workloads() -> list[dict]:
    """Every Workload of the cluster (all namespaces)."""
    api = client.custom_objects()
    result = with_retries(lambda: api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads"))
    return list(result.get("items") or [])


def workload_owners(workloads: list[dict]) -> set[tuple[str, str]]:
    """`(namespace, name)` of every batch/v1 Job that owns one of `workloads`. Pure."""
    return {
        (workload["metadata"]["namespace"], owner["name"])
        for workload in workloads
        for owner in workload["metadata"].get("ownerReferences") or []
        if owner.get("kind") == "Job" and owner.get("apiVersion", "").startswith("batch/")
    }


def nudge_jobs_without_workload(jobs: list[tuple[str, str]], *, at: str) -> list[str]:
    """Touch (`resources.nudge_job`) each Job of `jobs`, `(namespace, name)`, that owns no Workload, with one LIST of
    the cluster's Workloads (none when `jobs` is empty); the `namespace/name` of those touched (not one gone since)."""
    if not jobs:
        return []
    owners = workload_owners(list_workloads())
    return [f"{ns}/{name}" for ns, name in jobs if (ns, name) not in owners and nudge_job(ns, name, at=at)]


def job_has_workload(namespace: str, job_name: str) -> bool:
    """Whether Kueue has made a Workload for the Job `namespace/job_name` (one the Job owns)."""
    api = client.custom_objects()
    result = with_retries(lambda: api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads"))
    return (namespace, job_name) in workload_owners(list(result.get("items") or []))


def set_workload_check_state(workload: dict, check: dict) -> bool:
    """Write `check` (name, state, message, lastTransitionTime, maybe requeueAfterSeconds) into the Workload's
    `status.admissionChecks`, the other checks as they are. Optimistic: the patch carries the resourceVersion read,
    so a Workload Kueue wrote meanwhile answers 409 and False is returned (the next round reads it again); False too
    when it is gone."""
    metadata = workload["metadata"]
    checks = [c for c in (workload.get("status") or {}).get("admissionChecks") or [] if c["name"] != check["name"]]
    body = {
        "metadata": {"resourceVersion": metadata["resourceVersion"]},
        "status": {"admissionChecks": [*checks, check]},
    }
    api = client.custom_objects()
    try:
        with_retries(
            lambda: api.patch_namespaced_custom_object_status(
                KUEUE_GROUP, KUEUE_VERSION, metadata["namespace"], "workloads", metadata["name"], body
            )
        )
    except Exception as error:
        if _is(404, error) or _is(409, error):
            return False
        raise
    return True
