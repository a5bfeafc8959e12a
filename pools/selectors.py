"""Reads for the pool pages: the dashboard cards, the per-node GPU strips and the fragmentation table.

Everything a page shows is computed here, in a fixed number of queries whatever the number of pools, nodes and
pods: pools (1), occupancy and fragmentation (1, `pools.occupancy`), nodes with the GPUs each team holds on them
(1), reservations active now (1), metered GPU-hours of the month (1) and the teams the viewer may see (1).
Every signed-in user sees every pool; other teams' GPUs appear as "another team", without their names.
Also why a pool may not be deleted yet, which the service and Django admin's delete page share.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.db import connection
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.models import Team

from .choices import QuotaRequestState
from .lending import pool_lending, reservation_lending
from .models import Pool, Quota, QuotaRequest, Reservation
from .occupancy import JOB_SIZES, Occupancy, pool_occupancy

# Slot colours for the teams a viewer may see (CSS classes team-0 .. team-9 in reservoir.css).
TEAM_COLOURS = 10
SECONDS_PER_HOUR = Decimal(3600)
DCGM_FRESH = timedelta(hours=1)


class Segment(NamedTuple):
    """A run of GPU slots on one node: `kind` is team, other (another team), free or down (not schedulable)."""

    kind: str
    gpus: int
    label: str
    colour: int | None = None


def spill_targets() -> dict[int, tuple[int, ...]]:
    """Each pool's spill pools, by pool id, in the order they were set."""
    targets: dict[int, list[int]] = {}
    for from_id, to_id in Pool.spill_pools.through.objects.values_list("from_pool_id", "to_pool_id").order_by("id"):
        targets.setdefault(from_id, []).append(to_id)
    return {pool_id: tuple(to) for pool_id, to in targets.items()}


@dataclass(slots=True)
class NodeStrip:
    name: str
    allocatable: int
    used: int
    schedulable: bool
    ready: bool
    segments: list[Segment] = field(default_factory=list)

    @property
    def free(self) -> int:
        return max(self.allocatable - self.used, 0) if self.schedulable else 0


@dataclass
class PoolCard:
    pool: Pool
    occupancy: Occupancy
    reserved_now: int
    month_reserved_gpu_hours: Decimal | None
    month_used_gpu_hours: Decimal
    nodes: list[NodeStrip]
    dcgm_util_percent: int | None = None
    dcgm_at: datetime | None = None
    lent_now: int = 0  # GPUs of the pool's reservations other teams borrow now (pools.lending)
    lending: list["ReservationLending"] = field(default_factory=list)  # the viewer's teams' reservations here

    @property
    def contracted(self) -> int | None:
        return self.pool.contracted_gpus if self.pool.is_reserved else None

    @property
    def allocated_percent(self) -> int:
        live = self.occupancy.live_gpus
        return round(100 * self.occupancy.allocated / live) if live else 0

    @property
    def contract_gap(self) -> int:
        """Contracted GPUs the cluster does not report as live (NotReady or missing nodes): paid for, unusable."""
        if self.contracted is None:
            return 0
        return max(self.contracted - self.occupancy.live_gpus, 0)

    @property
    def month_use_percent(self) -> int | None:
        if not self.month_reserved_gpu_hours:
            return None
        return round(100 * self.month_used_gpu_hours / self.month_reserved_gpu_hours)

    @property
    def fragmentation(self) -> list[dict]:
        return [
            {
                "size": size,
                "fits": self.occupancy.fits[size],
                "stranded": self.occupancy.stranded(size),
                # The largest N for which a job of N nodes × `size` GPUs (one pod per node) fits now.
                "gang_nodes": self.occupancy.nodes_with_free(size),
            }
            for size in JOB_SIZES
        ]


@dataclass
class TeamKey:
    """Which colour a visible team's slots get; `legend` lists the teams that hold GPUs on the page."""

    visible: dict[int, str]
    colours: dict[int, int] = field(default_factory=dict)

    def colour(self, team_id: int) -> int:
        if team_id not in self.colours:
            self.colours[team_id] = len(self.colours) % TEAM_COLOURS
        return self.colours[team_id]

    @property
    def legend(self) -> list[tuple[str, int]]:
        return [(self.visible[team_id], colour) for team_id, colour in self.colours.items()]


_NODES_SQL = """
WITH held AS (
    SELECT node_name, team_id, SUM(gpus) AS gpus
    FROM jobs_pod
    WHERE scheduled AND phase IN ('Pending', 'Running') AND gpus > 0 AND node_name <> ''
    GROUP BY node_name, team_id
)
SELECT n.pool_id, n.name, n.gpu_allocatable, n.ready, n.ready AND NOT n.unschedulable, h.team_id,
       COALESCE(h.gpus, 0)
FROM pools_node n
LEFT JOIN held h ON h.node_name = n.name
WHERE n.pool_id = ANY(%s)
ORDER BY n.pool_id, n.name, h.team_id NULLS LAST
"""


def _node_strips(pool_ids: list[int], key: TeamKey, other_label: str) -> dict[int, list[NodeStrip]]:
    """Per pool, its nodes by name with the GPUs each team holds on them, as coloured segments."""
    with connection.cursor() as cursor:
        cursor.execute(_NODES_SQL, [pool_ids])
        rows = cursor.fetchall()
    strips: dict[int, list[NodeStrip]] = {pool_id: [] for pool_id in pool_ids}
    current: NodeStrip | None = None
    for pool_id, name, allocatable, ready, schedulable, team_id, gpus in rows:
        if current is None or current.name != name:
            current = NodeStrip(name=name, allocatable=allocatable, used=0, schedulable=schedulable, ready=ready)
            strips[pool_id].append(current)
        gpus = int(gpus)
        if not gpus:
            continue
        current.used += gpus
        if team_id in key.visible:
            current.segments.append(Segment("team", gpus, key.visible[team_id], key.colour(team_id)))
        else:
            current.segments.append(Segment("other", gpus, other_label))
    for node_strips in strips.values():
        for strip in node_strips:
            rest = max(strip.allocatable - strip.used, 0)
            if rest:
                strip.segments.append(Segment("free" if strip.schedulable else "down", rest, ""))
    return strips


def _month_usage(now: datetime) -> dict[int, tuple[Decimal, Decimal]]:
    """Per pool, (reserved, used) GPU-hours metered so far this month (billing's daily rollups)."""
    from billing.models import DailyUsage
    from billing.periods import month_of

    rows = DailyUsage.objects.month_sums(month_of(now), by=("pool_id",), through=now.date())
    return {
        row["pool_id"]: (
            (row["reserved"] / SECONDS_PER_HOUR).quantize(Decimal("0.1")),
            ((row["in_reservation"] + row["overage"] + row["spill"]) / SECONDS_PER_HOUR).quantize(Decimal("0.1")),
        )
        for row in rows
    }


def _dcgm_utilisation(pool_ids: list[int], now: datetime) -> dict[int, tuple[float, datetime]]:
    """Per pool, the latest mean GPU utilisation DCGM reported within the last hour (monitoring's samples)."""
    from monitoring.choices import Scope
    from monitoring.models import UtilisationSample

    rows = (
        UtilisationSample.objects.filter(
            scope=Scope.POOL, pool_id__in=pool_ids, at__gte=now - DCGM_FRESH, util_avg__isnull=False
        )
        .order_by("pool_id", "-at")
        .distinct("pool_id")
        .values_list("pool_id", "util_avg", "at")
    )
    return {pool_id: (util, at) for pool_id, util, at in rows}


def team_key(user) -> TeamKey:
    return TeamKey(visible=dict(Team.objects.visible_to(user).values_list("id", "name")))


def pool_cards(user, *, pools=None, other_label: str = "another team") -> tuple[list[PoolCard], TeamKey]:
    """The dashboard: one card per pool the user sees, with its nodes' strips, and the colour key of teams."""
    now = timezone.now()
    pools = list(pools if pools is not None else Pool.objects.visible_to(user).order_by("name"))
    pool_ids = [pool.pk for pool in pools]
    key = team_key(user)
    occupancy = pool_occupancy(pool_ids)
    strips = _node_strips(pool_ids, key, other_label)
    reserved = dict(
        Reservation.objects.active_at(now)
        .filter(pool_id__in=pool_ids)
        .values("pool")
        .annotate(total=Sum("gpus"))
        .values_list("pool", "total")
    )
    month = _month_usage(now)
    dcgm = _dcgm_utilisation(pool_ids, now)
    lending = pool_lending(pools=pools, now=now)
    rows = reservations_lending(
        Reservation.objects.filter(pool_id__in=pool_ids, team__in=Team.objects.visible_to(user)),
        lending,
        now=now,
        user=user,
    )
    cards = []
    for pool in pools:
        month_reserved, month_used = month.get(pool.pk, (Decimal("0.0"), Decimal("0.0")))
        cards.append(
            PoolCard(
                pool=pool,
                occupancy=occupancy.get(pool.pk, Occupancy(pool_id=pool.pk)),
                reserved_now=reserved.get(pool.pk, 0),
                month_reserved_gpu_hours=month_reserved if pool.is_reserved else None,
                month_used_gpu_hours=month_used,
                nodes=strips.get(pool.pk, []),
                dcgm_util_percent=round(dcgm[pool.pk][0]) if pool.pk in dcgm else None,
                dcgm_at=dcgm[pool.pk][1] if pool.pk in dcgm else None,
                lent_now=lending[pool.pk].from_lenders if pool.is_reserved and pool.pk in lending else 0,
                lending=[row for row in rows if row.reservation.pool_id == pool.pk],
            )
        )
    return cards, key


@dataclass
class ReservationLending:
    """One reservation's lending as the team page and the pool card show it."""

    reservation: Reservation
    active: bool
    lent_gpus: int = 0
    borrowing_teams: int = 0
    can_change: bool = False
    earned: Decimal | None = None  # earned by lending this month, for those who see the team's bill (set by views)


def reservations_lending(reservations, lending: dict, *, now: datetime, user=None) -> list[ReservationLending]:
    """The active and coming reservations among `reservations` (team and pool loaded), each with what it lends now
    (`pools.lending.reservation_lending`: GPUs that teams borrowing beyond the pool's unreserved GPUs hold of it, and
    how many teams borrow in the pool). With `user`, whether that user may change the setting."""
    current = list(
        reservations.filter(ends_at__gt=now).select_related("team", "pool").order_by("pool__name", "starts_at", "id")
    )
    active = [r for r in current if r.starts_at <= now]
    lent = reservation_lending(active, lending)
    led = set(Team.objects.led_by(user).values_list("pk", flat=True)) if user is not None else set()
    return [
        ReservationLending(
            reservation=reservation,
            active=reservation.starts_at <= now,
            can_change=reservation.team_id in led,
            **lent.get(reservation.pk, {}),
        )
        for reservation in current
    ]


def team_lending(team: Team, user, *, now: datetime | None = None) -> list[ReservationLending]:
    """The team's active and coming reservations with their lending now, for its page."""
    now = now or timezone.now()
    reservations = Reservation.objects.filter(team=team)
    pool_ids = list(reservations.filter(ends_at__gt=now).values_list("pool", flat=True).distinct())
    return reservations_lending(reservations, pool_lending(pool_ids, now=now), now=now, user=user)


# Request state -> CSS class of its badge (the job state colours of reservoir.css).
QUOTA_REQUEST_BADGES = {
    "pending": "state-pending",
    "approved": "state-succeeded",
    "rejected": "state-failed",
    "withdrawn": "state-cancelled",
}


def team_quota_requests(team: Team, *, decided_limit: int = 10) -> dict:
    """A team's pending quota requests and its latest decided ones (each with its badge class), in two queries."""
    from .choices import QuotaRequestState
    from .models import QuotaRequest

    rows = QuotaRequest.objects.filter(team=team).select_related("pool", "requested_by", "decided_by")
    pending = list(rows.filter(state=QuotaRequestState.PENDING).order_by("pool__name"))
    decided = list(rows.exclude(state=QuotaRequestState.PENDING).order_by("-decided_at", "-id")[:decided_limit])
    for quota_request in pending + decided:
        quota_request.badge = QUOTA_REQUEST_BADGES[quota_request.state]
    return {"pending_requests": pending, "decided_requests": decided}


def delete_refusal(pool: Pool) -> str | None:
    """Why `pool` may not be deleted yet, or None: its team quotas and pending quota requests would go with it,
    unaudited, so each is removed (or decided) through its own service first. `services.delete_pool` refuses with it,
    and Django admin shows it on the pool's delete page before asking."""
    pending = QuotaRequest.objects.filter(pool=pool, state=QuotaRequestState.PENDING)
    if not Quota.objects.filter(pool=pool).exists() and not pending.exists():
        return None
    message = _("%(pool)s has team quotas or pending quota requests: remove or decide them first.")
    return message % {"pool": pool.name}
