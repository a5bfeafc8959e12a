"""How hard the control plane's controllers may drive the API server: the devcluster's own settings (``tuned``, what
every cluster here runs) or the upstream defaults (``stock``).

Both the floor and the portal of `bench/admission.py` run on whichever is chosen, so the ratio between them stays
honest either way; running the benchmark once with each (``--control-plane stock``) reports what the tuning gives
the floor and the portal apart (issue 30). Nothing else reads ``stock``: ``make dev`` and the tests run ``tuned``.
A process reads the tuning of the `Cluster` object that starts it: Kueue restarted alone through an object made with
another tuning than the running control plane's gets that object's (`Cluster.running_tuning()` says what `up` chose).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    name: str
    # Kueue: reconciles at a time per kind, and its client's requests a second (and burst) to the API server.
    kueue_concurrency: dict[str, int]
    kueue_qps: int
    kueue_burst: int
    # kube-controller-manager: its client's rate, and the Job controller's syncs at a time.
    controller_manager_qps: int
    controller_manager_burst: int
    concurrent_job_syncs: int
    # kube-scheduler: its client's rate.
    scheduler_qps: int
    scheduler_burst: int


# Kueue's config/components/manager/controller_manager_config.yaml (v0.17.0), as its release manifests ship it.
_KUEUE_STOCK_CONCURRENCY = {
    "Job.batch": 5,
    "Pod": 5,
    "Workload.kueue.x-k8s.io": 5,
    "LocalQueue.kueue.x-k8s.io": 1,
    "Cohort.kueue.x-k8s.io": 1,
    "ClusterQueue.kueue.x-k8s.io": 1,
    "ResourceFlavor.kueue.x-k8s.io": 1,
}

STOCK = Tuning(
    name="stock",
    kueue_concurrency=dict(_KUEUE_STOCK_CONCURRENCY),
    kueue_qps=50,
    kueue_burst=100,
    # kube-controller-manager's flag defaults (--kube-api-qps, --kube-api-burst, --concurrent-job-syncs)
    controller_manager_qps=20,
    controller_manager_burst=30,
    concurrent_job_syncs=5,
    # KubeSchedulerConfiguration's clientConnection defaults
    scheduler_qps=50,
    scheduler_burst=100,
)

TUNED = Tuning(
    name="tuned",
    # Kueue's own, but 20 for Jobs. The Job reconciler (Workload made on create, Job unsuspended on admission) waits
    # on API round trips, not CPU: on a loaded 2-core machine one reconcile took 1.9 s, and with 5 at a time it fell
    # behind at under 3 a second while admitted Jobs waited to be unsuspended (bench/admission.py; 20 halved submit →
    # Running on a small run).
    kueue_concurrency={**_KUEUE_STOCK_CONCURRENCY, "Job.batch": 20},
    # Admission at scale is API-bound: the controllers may ask as fast as the API server answers.
    kueue_qps=500,
    kueue_burst=1000,
    controller_manager_qps=500,
    controller_manager_burst=1000,
    # The Job controller creates each admitted Job's pods and finishes the Job; its syncs wait on API round trips,
    # and 5 at a time (the default) left thousands of unsuspended Jobs without pods on this loaded 2-core machine.
    concurrent_job_syncs=20,
    scheduler_qps=500,
    scheduler_burst=1000,
)

TUNINGS = {tuning.name: tuning for tuning in (TUNED, STOCK)}


def named(name: str) -> Tuning:
    """The tuning called `name`, else ValueError naming the choices."""
    try:
        return TUNINGS[name]
    except KeyError:
        raise ValueError(f"unknown control-plane tuning {name!r}: choose one of {', '.join(TUNINGS)}") from None
