"""Typed wrappers over the calls the portal makes. Every function retries transient failures (cluster.errors)
and raises ClusterError for verdicts; "already there" and "already gone" are successes, so callers are
idempotent."""

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from . import client, live
from .errors import ClusterError, with_retries
from .facts import JobFacts, NodeFacts, job_facts, node_facts
from .labels import LABEL_MANAGED_BY, MANAGED_BY, NUDGED_ANNOTATION, USAGE_FINALIZER
from .namespaces import render_priority_classes
from .watch import iter_pages, list_pages

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
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        # Someone else's namespace under the team's name: its pods would be isolated, capped and billed to the team.
        raise ClusterError(
            f"namespace {name} exists and was not made by the portal (no label {LABEL_MANAGED_BY}={MANAGED_BY}): "
            "it is not taken over; rename the team, or label the namespace to hand it over",
            status=409,
        )
    wanted = manifest["metadata"]["labels"]
    current = {"labels": {key: labels.get(key) for key in wanted}}
    if current["labels"] != wanted:
        with_retries(lambda: core.patch_namespace(name, {"metadata": {"labels": wanted}}))
        return ApplyResult(corrected=True, before=current, after={"labels": wanted})
    return ApplyResult(before=current, after={"labels": wanted})


def apply_role_binding(manifest: dict) -> ApplyResult:
    """Create or put back a RoleBinding the portal owns (its subjects compared; the role it names is in its name,
    so its roleRef, which cannot change, never differs)."""
    from kubernetes import client as kube

    api = kube.RbacAuthorizationV1Api(client.api_client())

    def compare(obj):
        data = obj if isinstance(obj, dict) else client.api_client().sanitize_for_serialization(obj)
        return {"roleRef": data.get("roleRef"), "subjects": data.get("subjects") or []}

    return _apply_namespaced(
        manifest,
        read=api.read_namespaced_role_binding,
        create=api.create_namespaced_role_binding,
        replace=api.replace_namespaced_role_binding,
        compare=compare,
    )


def wait_until_allowed(namespace: str, *, verb: str, resource: str, group: str = "", timeout: float = 10.0) -> bool:
    """Wait until this process may `verb` `resource` in `namespace` (a SelfSubjectAccessReview, which every
    authenticated user may make): a RoleBinding just created reaches the API server's authorizer a moment later.
    True when allowed within `timeout`."""
    import time

    from kubernetes import client as kube

    api = kube.AuthorizationV1Api(client.api_client())
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": namespace, "verb": verb, "resource": resource, "group": group}},
    }
    deadline = time.monotonic() + timeout
    while True:
        if with_retries(lambda: api.create_self_subject_access_review(review)).status.allowed:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def namespace_names() -> set[str]:
    """Names of the namespaces that carry the portal's label (the team namespaces it made)."""
    core = client.core()
    result = with_retries(lambda: core.list_namespace(label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"))
    return {item.metadata.name for item in result.items}


def cluster_born_at():
    """When the cluster's storage began: the creation time of its `kube-system` namespace (a datetime)."""
    core = client.core()
    return with_retries(lambda: core.read_namespace("kube-system")).metadata.creation_timestamp


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


def apply_network_policy(manifest: dict) -> ApplyResult:
    """Create or put back a NetworkPolicy the portal owns (its spec compared as a whole)."""
    api = client.networking()
    return _apply_namespaced(
        manifest,
        read=api.read_namespaced_network_policy,
        create=api.create_namespaced_network_policy,
        replace=api.replace_namespaced_network_policy,
        compare=_spec,
    )


def network_policy_names(namespace: str) -> set[str]:
    """Names of the NetworkPolicies of the namespace that carry the portal's label."""
    api = client.networking()
    result = with_retries(
        lambda: api.list_namespaced_network_policy(namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}")
    )
    return {item.metadata.name for item in result.items}


def delete_network_policy(namespace: str, name: str) -> bool:
    """Delete a NetworkPolicy; False when it was already gone. (Callers delete only the portal's own.)"""
    api = client.networking()
    try:
        with_retries(lambda: api.delete_namespaced_network_policy(name, namespace))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def ensure_priority_classes() -> list[str]:
    """Create the portal's PriorityClasses. One that carries the portal's label but differs from the rendering is
    deleted and created again (its value and preemptionPolicy are immutable); one without the label is somebody
    else's and is left alone. Returns the names of the classes replaced."""
    api = client.scheduling()
    replaced = []
    for manifest in render_priority_classes():
        name = manifest["metadata"]["name"]
        try:
            existing = with_retries(lambda name=name: api.read_priority_class(name))
        except Exception as error:
            if not _is(404, error):
                raise
            _create_priority_class(api, manifest)
            continue
        if (existing.metadata.labels or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            log.warning("PriorityClass %s exists without the portal's label: left as it is", name)
            continue
        current = {
            "value": existing.value,
            "preemptionPolicy": existing.preemption_policy or "PreemptLowerPriority",
            "globalDefault": bool(existing.global_default),
            "description": existing.description or "",
        }
        if current == {key: manifest[key] for key in current}:
            continue
        log.warning("PriorityClass %s differs from the portal's (%s): deleting and creating it again", name, current)
        try:
            with_retries(lambda name=name: api.delete_priority_class(name))
        except Exception as error:
            if not _is(404, error):
                raise
        _create_priority_class(api, manifest)
        replaced.append(name)
    return replaced


def _create_priority_class(api, manifest: dict) -> None:
    try:
        with_retries(lambda: api.create_priority_class(manifest))
    except Exception as error:
        if not _is(409, error):
            raise


def create_job(manifest: dict) -> bool:
    """Create the Job; False when a Job of that name already exists (a retried submission).

    The answer (the whole Job) is not made into client models: nothing reads it, and turning it into a V1Job cost the
    submit task more CPU than sending the manifest (the same as `release_pod`)."""
    batch = client.batch()
    namespace = manifest["metadata"]["namespace"]

    def call():
        # an error status still raises ApiException; the body is drained so that the connection can be used again
        response = batch.create_namespaced_job(namespace, manifest, _preload_content=False)
        try:
            response.drain_conn()
        finally:
            response.release_conn()

    try:
        with_retries(call)
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


def job_uid(namespace: str, name: str) -> str | None:
    """The uid of the Job (what its dependents' ownerReferences name), None when it does not exist."""
    job = read_job(namespace, name)
    return job.metadata.uid if job is not None else None


def create_service(manifest: dict) -> bool:
    """Create the Service; False when one of that name already exists (a retried submission)."""
    core = client.core()
    namespace = manifest["metadata"]["namespace"]
    try:
        with_retries(lambda: core.create_namespaced_service(namespace, manifest))
    except Exception as error:
        if _is(409, error):
            return False
        raise
    return True


def delete_service(namespace: str, name: str) -> bool:
    """Delete the Service; False when it was already gone."""
    core = client.core()
    try:
        with_retries(lambda: core.delete_namespaced_service(name, namespace))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def managed_job_pages(*, page_size: int = 500) -> Iterator[list[JobFacts]]:
    """Every Job the portal labels as its own (`app.kubernetes.io/managed-by=reservoir`), in every namespace, as
    `JobFacts`, one page (a list) at a time; each page's call retried on transient failures."""
    batch = client.batch()

    def list_call(**kwargs):
        return with_retries(lambda: batch.list_job_for_all_namespaces(**kwargs))

    selector = {"label_selector": f"{LABEL_MANAGED_BY}={MANAGED_BY}"}
    for page, _version in iter_pages(list_call, selector, job_facts, page_size=page_size, timeout=60):
        yield page


def release_pod(namespace: str, name: str) -> bool:
    """Take the portal's usage finalizer off a pod (a strategic merge patch that removes only that entry, whatever
    other finalizers come and go meanwhile). False when the pod is already gone.

    The answer (the whole pod) is read but not made into client models: the sync releases every pod that ends, and
    turning each answer into a V1Pod was three quarters of the release's CPU (py-spy, bench/admission.py)."""
    core = client.core()
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [USAGE_FINALIZER]}}

    def call():
        # an error status still raises ApiException; the body is drained so that the connection can be used again
        response = core.patch_namespaced_pod(name, namespace, patch, _preload_content=False)
        try:
            response.drain_conn()
        finally:
            response.release_conn()

    try:
        with_retries(call)
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def patch_job(namespace: str, name: str, patch: dict):
    batch = client.batch()
    return with_retries(lambda: batch.patch_namespaced_job(name, namespace, patch))


def nudge_job(namespace: str, name: str, *, at: str) -> bool:
    """Touch the Job (its `NUDGED_ANNOTATION`, set to `at`) so that every controller watching Jobs looks at it again;
    nothing else of it changes. False when the Job is gone."""
    try:
        patch_job(namespace, name, {"metadata": {"annotations": {NUDGED_ANNOTATION: at}}})
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


def pod_log_tail(namespace: str, pod_name: str, *, lines: int = live.LOG_MAX_LINES) -> str:
    """The pod's log tail, bounded in lines and bytes (settings.LOG_TAIL_MAX_BYTES): `cluster.live.log_tail`, the
    one place live reads are made."""
    return live.log_tail(namespace, pod_name, max_lines=lines)


def list_nodes() -> list[NodeFacts]:
    """Every node of the cluster, as the facts the sync records (paged, raw JSON, no client models)."""
    items, _version = with_retries(lambda: list_pages(client.core().list_node))
    return [node_facts(item) for item in items]


def add_node_taints(name: str, taints: list[dict]) -> list[dict]:
    """Add `taints` to the node's, keeping every taint it has at the moment of the write: the list is read again and
    written with its resourceVersion, so a taint put on or taken off meanwhile (Kubernetes' own `not-ready`, an
    admin's maintenance taint) is neither lost nor brought back. A conflict reads again (three tries).

    Returns the taints of `taints` it added. A node carries one taint per key and effect, so one whose key and effect
    the node already has (with another value, or the same) is not added, and never replaced."""
    core = client.core()
    api = client.api_client()
    for attempt in range(3):
        node = api.sanitize_for_serialization(with_retries(lambda: core.read_node(name)))
        present = list((node.get("spec") or {}).get("taints") or [])
        added = [
            t for t in taints if not any(p.get("key") == t["key"] and p.get("effect") == t["effect"] for p in present)
        ]
        if not added:
            return []
        version = node["metadata"]["resourceVersion"]
        body = {"metadata": {"resourceVersion": version}, "spec": {"taints": present + added}}
        try:
            with_retries(lambda body=body: core.patch_node(name, body))
            return added
        except ClusterError as error:
            if error.status != 409 or attempt == 2:
                raise


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


# --- team data: claims and secrets in team namespaces (cluster/team_data.py renders them) -----------------------


def _as_json(obj) -> dict:
    return client.api_client().sanitize_for_serialization(obj)


def create_claim(manifest: dict) -> bool:
    """Create a PersistentVolumeClaim; False when one of that name already exists."""
    core = client.core()
    try:
        with_retries(
            lambda: core.create_namespaced_persistent_volume_claim(manifest["metadata"]["namespace"], manifest)
        )
    except Exception as error:
        if _is(409, error):
            return False
        raise
    return True


def read_claim(namespace: str, name: str):
    """The claim's facts (cluster.team_data.ClaimFacts), or None when there is no such claim."""
    from .team_data import claim_facts

    core = client.core()
    try:
        claim = with_retries(lambda: core.read_namespaced_persistent_volume_claim(name, namespace))
    except Exception as error:
        if _is(404, error):
            return None
        raise
    return claim_facts(_as_json(claim))


def list_claims() -> dict:
    """Every claim of the cluster, by (namespace, name), as ClaimFacts."""
    from .team_data import claim_facts

    core = client.core()
    claims = with_retries(lambda: core.list_persistent_volume_claim_for_all_namespaces())
    facts = [claim_facts(item) for item in _as_json(claims).get("items") or []]
    return {(item.namespace, item.name): item for item in facts}


def claim_warning(namespace: str, name: str) -> str:
    """The newest Warning event about the claim (why it does not bind), or ""."""
    core = client.core()
    selector = f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name},type=Warning"
    events = with_retries(lambda: core.list_namespaced_event(namespace, field_selector=selector)).items
    if not events:
        return ""
    newest = max(
        events, key=lambda event: event.last_timestamp or event.event_time or event.metadata.creation_timestamp
    )
    return (newest.message or "").strip()


class NotManagedByPortal(ClusterError):
    """An object of that name exists in the namespace and the portal did not create it: it is left alone."""


def apply_secret(manifest: dict) -> bool:
    """Create or replace a Secret the portal owns; True when created. A Secret of that name without the portal's
    label raises NotManagedByPortal. (The manifest holds values: it is never logged or kept.)"""
    core = client.core()
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    try:
        with_retries(lambda: core.create_namespaced_secret(namespace, manifest))
        return True
    except Exception as error:
        if not _is(409, error):
            raise
    existing = with_retries(lambda: core.read_namespaced_secret(name, namespace))
    if (existing.metadata.labels or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        raise NotManagedByPortal(f"a Secret named {name} exists in {namespace} and was not made by the portal")
    body = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": existing.metadata.resource_version}}
    with_retries(lambda: core.replace_namespaced_secret(name, namespace, body))
    return False


def delete_secret(namespace: str, name: str) -> bool:
    """Delete a Secret the portal owns; False when it was already gone or is not the portal's."""
    core = client.core()
    try:
        existing = with_retries(lambda: core.read_namespaced_secret(name, namespace))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    if (existing.metadata.labels or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        return False
    try:
        with_retries(lambda: core.delete_namespaced_secret(name, namespace))
    except Exception as error:
        if _is(404, error):
            return False
        raise
    return True


@dataclass(frozen=True)
class StorageClassFacts:
    name: str
    provisioner: str
    is_default: bool  # the class a claim that names none is given

    @property
    def provisions(self) -> bool:
        """Whether volumes are made for claims (False: only volumes made ahead of time bind)."""
        return self.provisioner != NO_PROVISIONER


NO_PROVISIONER = "kubernetes.io/no-provisioner"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


def _storage_class_facts(item) -> StorageClassFacts:
    annotations = item.metadata.annotations or {}
    return StorageClassFacts(
        name=item.metadata.name,
        provisioner=item.provisioner or "",
        is_default=any(annotations.get(key) == "true" for key in DEFAULT_CLASS_ANNOTATIONS),
    )


def storage_classes() -> list[StorageClassFacts]:
    """Every StorageClass of the cluster."""
    return [_storage_class_facts(item) for item in with_retries(lambda: client.storage().list_storage_class()).items]


def read_storage_class(name: str) -> StorageClassFacts | None:
    """The class, or None when the cluster has none of that name."""
    try:
        return _storage_class_facts(with_retries(lambda: client.storage().read_storage_class(name)))
    except Exception as error:
        if _is(404, error):
            return None
        raise
