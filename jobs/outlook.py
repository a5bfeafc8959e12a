"""The submit form's outlook: what submitting a job as typed would do — when it starts (now, in a spill pool,
Pending for a node, queued behind the team's quota or the cohort's borrowable GPUs, or never, and why), the team's
quota after it, and the manifest the worker would send. Reads only; whether Kueue admits it at once is read off its
start-time quote (`jobs.quote_preview`, which also finds the alternatives), so the two agree."""

from dataclasses import dataclass, field

import yaml
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from cluster.manifests import LABEL_JOB_ID
from pools.lending import pool_lending
from pools.models import Pool, Quota, Reservation
from pools.occupancy import GangFit, Occupancy, gang_fit, pool_occupancy
from portal.models import Team
from portal.snapshot import one_snapshot

from . import policy, reasons
from .choices import Placement
from .manifests import render, render_service
from .models import Job
from .quote_preview import PreviewQuote, preview_quote
from .services import check_fits_limits, gpus_in_use
from .specs import JobSpec, validate_spec


@dataclass
class Outlook:
    """What submitting `spec` would do: the quota after it, when it starts, and the manifest."""

    start: str  # now | now_spill | pending | queued | never
    start_text: str
    quota: int = 0
    in_use: int = 0
    after: int = 0
    position: int | None = None
    manifest_yaml: str = ""
    problems: list[str] = field(default_factory=list)
    gang: "GangFit | None" = None  # a multi-node job: whether N nodes with G free GPUs each exist now
    preview: "PreviewQuote | None" = None  # the start-time quote the start is read off, with its alternatives

    @property
    def quota_percent_after(self) -> int:
        return min(round(100 * self.after / self.quota), 100) if self.quota else 100


def _placeholder_ids(manifest: dict) -> dict:
    manifest["metadata"]["name"] = "rsv-<id>"
    for labels in (manifest["metadata"]["labels"], manifest["spec"]["template"]["metadata"]["labels"]):
        labels[LABEL_JOB_ID] = "<id>"
    return manifest


def manifest_preview(*, team: Team, pool: Pool, spec: JobSpec) -> str:
    job = Job(team=team, pool=pool, **spec.as_model_fields())
    text = yaml.safe_dump(_placeholder_ids(render(job)), sort_keys=False, allow_unicode=True)
    if job.is_gang:
        text += "---\n" + yaml.safe_dump(render_service(job), sort_keys=False, allow_unicode=True)
        # The id is known once the job is saved: the names and selectors derived from it show a placeholder.
        text = text.replace(job.job_name, "rsv-<id>").replace(f"{LABEL_JOB_ID}: 'None'", f"{LABEL_JOB_ID}: <id>")
    return text


def borrowable_gpus(pool: Pool, *, now=None) -> int:
    """GPUs of `pool` a team could borrow from the cohort right now: the pool's unreserved GPUs (what its
    `pool-<slug>-unreserved` ClusterQueue holds in Kueue) plus what the pool's reservations lend while idle, minus
    what teams already use of both (`pools.lending`)."""
    return pool_lending([pool.pk], now=now)[pool.pk].borrowable


def submit_outlook(*, team: Team, pool: Pool, spec: JobSpec, user=None, now=None) -> Outlook:
    """What the submit preview says of `spec`: when it starts, the quota after it, its manifest; "never" (and why)
    when it can never fit, or when `user` may not submit it as it is (`policy.submission_errors`: what the submit
    would refuse is not quoted as if it were taken).

    Whether Kueue admits it at once, and in which pool, is read off the job's start-time quote
    (`quote_preview.preview_quote`, kept in `Outlook.preview` for the page to show), which knows the team's room in
    every pool the job may be admitted in and its queueing strategy: the expected start and the quote below it never
    disagree. On top of that: whether a node of that pool has room for it now (else it waits Pending for one)."""
    try:
        validate_spec(spec)
        check_fits_limits(team=team, pool=pool, spec=spec)
    except ValidationError as error:
        messages = [str(m) for m in error.messages]
        return Outlook(
            start="never", start_text=_("Cannot fit: %(why)s") % {"why": " ".join(messages)}, problems=messages
        )
    if user is not None and (refused := list(policy.submission_errors(team=team, user=user, spec=spec).values())):
        return Outlook(
            start="never", start_text=_("Cannot submit: %(why)s") % {"why": " ".join(refused)}, problems=refused
        )
    with one_snapshot():
        return _taken_outlook(team=team, pool=pool, spec=spec, now=now or timezone.now())


def _taken_outlook(*, team: Team, pool: Pool, spec: JobSpec, now) -> Outlook:
    preview = preview_quote(team=team, pool=pool, spec=spec, now=now)
    quote = preview.quote
    quota = Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first() or 0
    in_use = gpus_in_use(team=team, pool=pool)
    outlook = Outlook(start="", start_text="", quota=quota, in_use=in_use, after=in_use + spec.total_gpus)
    outlook.preview = preview
    outlook.manifest_yaml = manifest_preview(team=team, pool=pool, spec=spec)
    if not quote.admitted_now:
        return _queued(outlook, team=team, pool=pool, spec=spec, preview=preview, now=now)
    spills = {each.pk: each for each in pool.spill_pools.all()}
    occupancy = pool_occupancy([pool.pk, *spills])
    if quote.pool_id in spills:  # the team has no room left in its home pool: Kueue admits it in a spill pool
        where = spills[quote.pool_id]
        there = occupancy.get(where.pk, Occupancy(pool_id=where.pk))
        if spec.nodes > 1:
            return _gang_start(outlook, pool=where, spec=spec, home=there)
        if there.largest_free_block >= spec.gpus:
            outlook.start = "now_spill"
            outlook.start_text = _(
                "Starts now in %(spill)s, a spill pool: the team has no room for it in %(pool)s."
            ) % {"spill": where.name, "pool": pool.name}
            return outlook
        outlook.start = "pending"
        outlook.start_text = _(
            "Admitted, then Pending in the cluster: the largest free block in %(pool)s is %(n)d GPUs."
        ) % {"pool": where.name, "n": there.largest_free_block}
        return outlook
    home = occupancy.get(pool.pk, Occupancy(pool_id=pool.pk))
    if spec.nodes > 1:
        return _gang_start(outlook, pool=pool, spec=spec, home=home)
    if home.largest_free_block >= spec.gpus:
        outlook.start, outlook.start_text = "now", _("Starts now in %(pool)s.") % {"pool": pool.name}
        return outlook
    spill_free = max((occupancy[p].largest_free_block for p in spills if p in occupancy), default=0)
    if spec.placement == Placement.SOFT and spill_free >= spec.gpus:
        outlook.start, outlook.start_text = (
            "now_spill",
            _("Starts now in a spill pool: %(pool)s is full.") % {"pool": pool.name},
        )
    elif spec.placement == Placement.SPILL_AFTER and spill_free >= spec.gpus:
        outlook.start = "pending"
        outlook.start_text = _("Waits for %(pool)s, then spills after %(n)d minutes (a spill pool has room).") % {
            "pool": pool.name,
            "n": spec.spill_after_minutes or 0,
        }
    else:
        outlook.start = "pending"
        outlook.start_text = _(
            "Admitted, then Pending in the cluster: the largest free block in %(pool)s is %(n)d GPUs."
        ) % {"pool": pool.name, "n": home.largest_free_block}
    return outlook


def _queued(outlook: Outlook, *, team: Team, pool: Pool, spec: JobSpec, preview: PreviewQuote, now) -> Outlook:
    """A job Kueue does not admit at once: at its place in the team's queue; first in it, and waiting for GPUs other
    teams borrow, how many above the team's reservation it needs; never, when it needs more than the team can ever
    hold (as its quote says)."""
    outlook.start, outlook.position = "queued", preview.position
    if preview.quote.never:
        outlook.start_text = _(
            "Queued at position %(k)d, but it cannot start: it needs %(n)d GPUs, more than the team can ever hold in "
            "%(pool)s."
        ) % {"k": preview.position, "n": spec.total_gpus, "pool": pool.name}
        return outlook
    if preview.quote.waits_for_others and preview.position == 1:
        reserved = sum(Reservation.objects.filter(team=team, pool=pool).active_at(now).values_list("gpus", flat=True))
        to_borrow = max(outlook.in_use + spec.total_gpus - max(reserved, outlook.in_use), 0)
        if to_borrow and to_borrow > borrowable_gpus(pool, now=now):
            outlook.start_text = _(
                "Queued: it needs %(n)d GPUs above the team's reservation and %(pool)s's unreserved and lent GPUs are "
                "in use; Kueue admits it when enough of them are freed."
            ) % {"n": to_borrow, "pool": pool.name}
            return outlook
    outlook.start_text = _("Queued at position %(k)d: Kueue admits it when the team's quota has room.") % {
        "k": preview.position
    }
    return outlook


def _gang_start(outlook: Outlook, *, pool: Pool, spec: JobSpec, home: Occupancy) -> Outlook:
    """When a multi-node job admitted now would start: at once if N nodes of the home pool each have G free GPUs
    (a gang is never spread over spill pools: its pods must find each other and share the placement), else its
    pods wait and Kueue requeues it if they do not all start within its waitForPodsReady timeout."""
    outlook.gang = gang_fit(home, nodes=spec.nodes, gpus=spec.gpus)
    if outlook.gang.fits:
        outlook.start = "now"
        outlook.start_text = _(
            "Starts now in %(pool)s: %(have)d nodes have %(gpus)d free GPUs, it needs %(nodes)d."
        ) % {
            "pool": pool.name,
            "have": outlook.gang.nodes_with_room,
            "gpus": spec.gpus,
            "nodes": spec.nodes,
        }
    else:
        outlook.start = "pending"
        outlook.start_text = _(
            "Admitted, then waits in the cluster: it %(fit)s. If its pods do not all start in time, Kueue gives its "
            "GPUs back and requeues it."
        ) % {"fit": reasons.gang_hint(outlook.gang)}
    return outlook
