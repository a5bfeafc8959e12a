"""The reconcile tasks (queue: cluster). Thin: take ids, re-check state on entry, and let the reconcilers decide. Their
names are the ones they had when they lived beside their apps (`pools.*`, `jobs.*`, `teamdata.*`): messages waiting in
the outbox and beat's schedules (each app's beat.py) name them.

The tasks that call the cluster use the one retry policy of `portal.retry.ClusterTask` (each cluster call tried once,
the task retried with backoff and jitter on a transient failure; when a submission gives up, the job is Failed with
the reason after a verdict, or left Queued for convergence to send again: `jobs.observations.give_up_submission`).
Three periodic sweeps do not retry as tasks: the namespace sweep goes on to the next team when one fails, and the
reservation-boundary check and convergence run every few seconds, so their next run is their retry (retries of them
would pile up during an outage); their cluster calls are tried once (portal/retry.py)."""

import logging

from celery import shared_task

from cluster.errors import ClusterError, describe, is_transient, is_verdict, single_attempt
from jobs import observations
from portal.models import Team
from portal.retry import ClusterTask
from teamdata.models import TeamVolume

from . import budget, jobs, kueue, namespaces, taints, volumes

log = logging.getLogger(__name__)


# --- team namespaces, node taints and Kueue's objects -------------------------------------------------------------


@shared_task(base=ClusterTask, name="pools.reconcile_team_namespace")
def reconcile_team_namespace(team_id: int) -> dict | None:
    team = Team.objects.filter(pk=team_id).first()
    if team is None:
        return None
    return namespaces.reconcile(team)


@shared_task(name="pools.reconcile_all_namespaces", acks_late=True)
def reconcile_all_namespaces() -> int:
    """Periodic: put back any hand edit of a team's ResourceQuota, LimitRange or NetworkPolicies."""
    count = 0
    for team in Team.objects.order_by("pk"):
        try:
            with single_attempt():
                namespaces.reconcile(team)
            count += 1
        except Exception:  # noqa: BLE001 - one team's failure must not stop the others; it is logged and recorded
            log.exception("reconcile of team %s failed", team.slug)
    return count


@shared_task(base=ClusterTask, name="pools.reconcile_node_taints")
def reconcile_node_taints() -> dict:
    return taints.reconcile_taints()


@shared_task(base=ClusterTask, name="pools.reconcile_kueue")
def reconcile_kueue(version: int | None = None) -> dict:
    """Make Kueue's objects match the portal. With `version` (sent by a change), nothing is done when a reconcile
    already applied it; without (the periodic run), always: that is what puts back hand edits."""
    return kueue.summary(kueue.reconcile(unless_applied=version))


@shared_task(name="pools.reconcile_kueue_at_reservation_boundary", acks_late=True)
def reconcile_kueue_at_reservation_boundary() -> dict | None:
    """Frequent and cheap: reconcile Kueue's objects when a reservation started or ended since the last rendering."""
    with single_attempt():
        outcome = kueue.reconcile_at_reservation_boundary()
    return None if outcome is None else kueue.summary(outcome)


@shared_task(name="billing.check_budgets", acks_late=True)
def check_budgets() -> dict:
    """Frequent: the controller of the budget's AdmissionCheck (reconcile/budget.py) answers the Workloads waiting for
    it. Its next run is its retry."""
    with single_attempt():
        return budget.check_budgets()


# --- jobs --------------------------------------------------------------------------------------------------------


class SubmitTask(ClusterTask):
    def gave_up(self, error: BaseException, job_id: int, *args, **kwargs) -> None:
        """Fails the job only on the apiserver's verdict, and never a job the cluster already has
        (`observations.give_up_submission`): a database error or any other of the portal's own leaves it for
        convergence to send again."""
        reason = str(error) if isinstance(error, ClusterError) else describe(error)
        observations.give_up_submission(
            job_id=job_id, reason=reason, verdict=is_verdict(error), transient=is_transient(error)
        )


@shared_task(base=SubmitTask, name="jobs.submit_job", bind=True)
def submit_job_to_cluster(self, job_id: int) -> str:
    return jobs.create_in_cluster(job_id, attempt=self.request.retries + 1, attempts=self.max_retries + 1)


@shared_task(base=ClusterTask, name="jobs.delete_job", bind=True)
def delete_job_from_cluster(self, job_id: int) -> str:
    return jobs.delete_from_cluster(job_id)


@shared_task(name="jobs.converge", acks_late=True)
def converge() -> dict:
    """Periodic: bring the cluster in line with the database (reconcile/jobs.py)."""
    return jobs.converge()


# --- volumes -----------------------------------------------------------------------------------------------------


@shared_task(base=ClusterTask, name="teamdata.ensure_volume")
def ensure_volume(volume_id: int) -> str:
    volume = TeamVolume.objects.select_related("team").filter(pk=volume_id).first()
    if volume is None:
        return "gone"
    return volumes.ensure_volume(volume)


@shared_task(name="teamdata.refresh_volumes", acks_late=True)
def refresh_volumes() -> int:
    """Periodic: record each registered volume's claim state (bound, pending with why, lost, gone), and make the claim
    of a volume nothing has examined yet (its task gave up or was lost). Its next run is its retry: each cluster call
    is tried once."""
    with single_attempt():
        return volumes.refresh_volumes()
