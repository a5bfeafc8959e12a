"""The submit preview's start-time quote: the job as typed, put in its team's queue where Kueue would put it and
quoted like every queued job (`jobs.quote.quote_queue` on `jobs.quote_selectors.team_queues`), and up to three
alternatives that start meaningfully sooner (fewer GPUs, soft placement, another pool with its price per hour), each
one the submit would take as the form sends it."""

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.money import format_money, hourly_cost
from pools.choices import PoolKind
from pools.lending import team_uses
from pools.models import Node, Pool, Quota
from pools.selectors import spill_targets
from portal.models import Team
from portal.snapshot import one_snapshot

from .choices import JobState, Placement
from .quote import Quote, TeamQueue, Waiting, quote_queue
from .quote_selectors import admissible_pools, team_queues
from .services import check_fits_limits
from .specs import JobSpec, max_grace_seconds, validate_spec

MAX_ALTERNATIVES = 3


@dataclass
class Alternative:
    """The same job with one change (`changes`: form fields and values), quoted the same way, with what it costs
    per hour under the metering rules."""

    label: str
    changes: dict
    quote: Quote
    price_per_hour: Decimal
    price_words: str = ""

    @property
    def take_value(self) -> str:
        from urllib.parse import urlencode

        return urlencode(self.changes)


@dataclass
class PreviewQuote:
    """The typed job's quote, its place in its team's queue (1: nobody ahead) and the alternatives."""

    quote: Quote
    alternatives: list[Alternative] = field(default_factory=list)
    position: int = 1


def _queue_with(queue: TeamQueue, *, waiting: Waiting, priority: int, priorities: dict[int, int]) -> TeamQueue:
    """`queue` with the preview's job put where Kueue would: after every queued job of the same or a higher
    priority."""
    at = sum(1 for job in queue.waiting if priorities.get(job.job_id, 0) >= priority)
    return replace(queue, waiting=[*queue.waiting[:at], waiting, *queue.waiting[at:]])


def _price_per_hour(*, pool: Pool, gpus: int, uses: dict, team_id: int) -> Decimal:
    """What `gpus` more GPUs cost per hour in `pool` (PRODUCT.md, metering): inside the team's reservation nothing
    more (its monthly fee is paid anyway), above it or in an elastic or shared pool the pool's hourly price."""
    if pool.kind == PoolKind.RESERVED:
        use = uses.get(pool.pk, {}).get(team_id)
        reserved, used = (use.reserved, use.used) if use else (0, 0)
        gpus = max(used + gpus - max(reserved, used), 0)
    return hourly_cost(Decimal(gpus * 3600), pool.hourly_price_per_gpu)


def _nodes_can_hold(pool: Pool, *, gpus: int, nodes: int) -> bool:
    """Whether `nodes` nodes of `pool` have `gpus` GPUs or more each (a pool with no node recorded yet: yes, as
    `services.check_fits_limits` says)."""
    counted = Node.objects.filter(pool=pool).aggregate(
        recorded=Count("pk"), big_enough=Count("pk", filter=Q(gpu_allocatable__gte=gpus))
    )
    return not counted["recorded"] or counted["big_enough"] >= nodes


def _meaningfully(base: Quote, *, now: datetime) -> timedelta:
    """How much sooner an alternative must start to be offered: 5 minutes, or a tenth of the wait if longer."""
    if base.estimate is None:  # it never starts, or no time is known: any quoted start is sooner
        return timedelta(0)
    return max(timedelta(minutes=5), (base.estimate - now) / 10)


def preview_quote(*, team: Team, pool: Pool, spec: JobSpec, now: datetime | None = None) -> PreviewQuote:
    """The quote of `spec` if submitted now, and up to three alternatives that start meaningfully sooner: fewer
    GPUs, soft placement, or another pool the team has quota in (each with its price per hour). A shorter maximum
    run time is quoted too, but Kueue admits by quota and order, not run time, so it never starts sooner and is
    never offered. Its reads agree with each other (one snapshot, as `team_queues`)."""
    with one_snapshot():
        return _preview_quote(team=team, pool=pool, spec=spec, now=now or timezone.now())


def _preview_quote(*, team: Team, pool: Pool, spec: JobSpec, now: datetime) -> PreviewQuote:
    from .models import Job

    quota_pools = set(Quota.objects.filter(team=team, max_gpus__gt=0).values_list("pool_id", flat=True))
    spill = spill_targets()
    extra = {pool.pk, *quota_pools, *spill.get(pool.pk, ())}
    queue = team_queues([team.pk], now=now, extra_pools={team.pk: extra})[team.pk]
    priorities = dict(Job.objects.filter(team=team, state=JobState.QUEUED).values_list("id", "priority").order_by())
    pools = {each.pk: each for each in Pool.objects.filter(pk__in=extra)}
    uses = team_uses(sorted(extra), now=now)

    def quoted(*, pool_id: int, gpus_per_node: int, placement: str, max_run_minutes: int) -> Quote:
        where = admissible_pools(pool_id=pool_id, placement=placement, spilled=False, spill=spill)
        waiting = Waiting(
            None,
            gpus_per_node * spec.nodes,
            max_run_minutes * 60,
            where,
            spec.priority,
            min(spec.termination_grace_seconds, max_grace_seconds()),
            per_node=gpus_per_node,
        )
        return quote_queue(_queue_with(queue, waiting=waiting, priority=spec.priority, priorities=priorities), now=now)[
            None
        ]

    base = quoted(
        pool_id=pool.pk, gpus_per_node=spec.gpus, placement=spec.placement, max_run_minutes=spec.max_run_minutes
    )
    position = 1 + sum(1 for priority in priorities.values() if priority >= spec.priority)
    result = PreviewQuote(quote=base, position=position)
    if base.starts_now:
        return result
    candidates: list[Alternative] = []

    by = _meaningfully(base, now=now)

    def offer(label: str, changes: dict, quote: Quote, *, target: Pool, changed: JobSpec) -> bool:
        """Offer the changed job when it starts meaningfully sooner and the submit would take it (its checks,
        `check_fits_limits`, only then: a node too small in another pool, no pool to spill into), in a pool whose
        nodes could hold it (its quota may have room in a spill pool of small nodes). Whether it was offered."""
        if not quote.sooner_than(base, by=by):
            return False
        try:
            validate_spec(changed)
            check_fits_limits(team=team, pool=target, spec=changed)
        except ValidationError:
            return False
        where = pools.get(quote.pool_id) if quote.pool_id else None
        if where is not None and not _nodes_can_hold(where, gpus=changed.gpus, nodes=changed.nodes):
            return False
        price = Decimal(0)
        if where is not None:
            price = _price_per_hour(pool=where, gpus=changed.total_gpus, uses=uses, team_id=team.pk)
        candidates.append(Alternative(label, changes, quote, price, format_money(price)))
        return True

    # Fewer GPUs per node, the most first: as many as the team has room for now (and, on one node, a node has free
    # now), then halves of the request; the first that starts meaningfully sooner is offered.
    fit_now = queue.room.get(pool.pk, 0) // spec.nodes
    if spec.nodes == 1:
        fit_now = min(fit_now, queue.free_blocks.get(pool.pk, 0))
    counts = {spec.gpus >> shift for shift in range(1, spec.gpus.bit_length())} | {fit_now}
    for gpus in sorted((each for each in counts if 1 <= each < spec.gpus), reverse=True):
        quote = quoted(
            pool_id=pool.pk, gpus_per_node=gpus, placement=spec.placement, max_run_minutes=spec.max_run_minutes
        )
        label = _("with %(n)d GPUs per node") % {"n": gpus}
        if offer(label, {"gpus": gpus}, quote, target=pool, changed=replace(spec, gpus=gpus)):
            break
    if spec.placement != Placement.SOFT and spill.get(pool.pk) and spec.nodes == 1:
        quote = quoted(
            pool_id=pool.pk, gpus_per_node=spec.gpus, placement=Placement.SOFT, max_run_minutes=spec.max_run_minutes
        )
        soft = replace(spec, placement=Placement.SOFT)
        offer(_("with soft placement"), {"placement": Placement.SOFT}, quote, target=pool, changed=soft)
    for other in sorted(quota_pools - {pool.pk}, key=lambda pk: pools[pk].name if pk in pools else ""):
        if other not in pools:
            continue
        quote = quoted(
            pool_id=other, gpus_per_node=spec.gpus, placement=spec.placement, max_run_minutes=spec.max_run_minutes
        )
        label = _("in %(pool)s") % {"pool": pools[other].name}
        offer(label, {"pool": pools[other].slug}, quote, target=pools[other], changed=spec)
    shorter = max(spec.max_run_minutes // 2, 1)
    if shorter < spec.max_run_minutes:
        quote = quoted(pool_id=pool.pk, gpus_per_node=spec.gpus, placement=spec.placement, max_run_minutes=shorter)
        label = _("with a maximum run time of %(n)d minutes") % {"n": shorter}
        changed = replace(spec, max_run_minutes=shorter)
        offer(label, {"max_run_minutes": shorter}, quote, target=pool, changed=changed)
    candidates.sort(key=lambda each: (each.quote.estimate, each.price_per_hour))
    result.alternatives = candidates[:MAX_ALTERNATIVES]
    return result
