"""Who lends and who borrows in a reserved pool right now, computed the way Kueue's cohort counts it.

Kueue (v0.17, `pkg/cache/scheduler/resource_node.go`) keeps, per team ClusterQueue and pool flavor, a local quota
`nominal − lendingLimit` that only the team may use; the rest of its nominal quota (`lendingLimit`) goes to the
cohort, with the pool's `pool-<slug>-unreserved` queue lending everything. A team's use above its local quota
counts against the cohort. So, per pool, with `reserved`, `lendable` and `used` per team (used = GPUs of its
admitted jobs there):

- a team borrows `max(used − reserved, 0)`;
- the cohort holds `unreserved + Σ lendable` and its use is `Σ max(used − (reserved − lendable), 0)`; what a team
  could still borrow is the difference (capped by its own borrowing limit, which the caller knows);
- borrowers are served first by the unreserved GPUs (PRODUCT.md, metering): `from_lenders = max(Σ borrowed −
  unreserved, 0)`; lenders lend `from_lenders` pro rata to the idle GPUs each lends at that moment
  (`idle = max(min(lendable, reserved − used), 0)`), split in whole GPUs by largest remainder (ties by team id) so
  that what lenders lend adds up to `from_lenders` exactly.

What a team may still be admitted on in the pool (`available_to`) is Kueue's own sum: what its guaranteed share
(`reserved − lendable`) leaves free, plus what it may take from the cohort — the cohort's free GPUs, capped by what
it stored there (`lendable`) less what it already uses there, plus its borrowing limit (`quota − reserved`).

Kueue itself does not say whose GPUs a borrower holds (the cohort's quota is one pool); the attribution above is
the portal's: metering applies the same rule with exact (not whole-GPU) shares, rounded per pool and day.
"""

from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from .choices import PoolKind


@dataclass(frozen=True)
class TeamUse:
    """One team in one pool: GPUs reserved there (active now), how many of them it lends, how many it uses."""

    team_id: int
    reserved: int = 0
    lendable: int = 0
    used: int = 0

    @property
    def borrowed(self) -> int:
        return max(self.used - self.reserved, 0)

    @property
    def idle_lent(self) -> int:
        """Lendable GPUs the team's own jobs leave idle: what others may hold of its reservation right now."""
        return max(min(self.lendable, self.reserved - self.used), 0)


@dataclass
class PoolLending:
    """A pool's lending right now (see the module docstring)."""

    unreserved: int
    borrowed_by_team: dict[int, int] = field(default_factory=dict)
    lent_by_team: dict[int, int] = field(default_factory=dict)
    from_lenders: int = 0
    borrowable: int = 0
    cohort_quota: int = 0  # the unreserved GPUs plus every reservation's lendable ones: the cohort's whole quota

    def borrowers_other_than(self, team_id: int) -> int:
        """How many teams other than `team_id` borrow in the pool now."""
        return sum(1 for other, gpus in self.borrowed_by_team.items() if gpus and other != team_id)


def split_pool(*, unreserved: int, uses: list[TeamUse]) -> PoolLending:
    """The pure rule of the module docstring, for one pool."""
    borrowed = {use.team_id: use.borrowed for use in uses if use.borrowed}
    from_lenders = max(sum(borrowed.values()) - unreserved, 0)
    idle = {use.team_id: use.idle_lent for use in uses if use.idle_lent}
    lent: dict[int, int] = {}
    total_idle = sum(idle.values())
    if from_lenders and total_idle:
        share = min(from_lenders, total_idle)
        exact = {team: share * gpus / total_idle for team, gpus in idle.items()}
        lent = {team: int(value) for team, value in exact.items()}
        rest = share - sum(lent.values())
        for team in sorted(exact, key=lambda t: (-(exact[t] - lent[t]), t))[:rest]:
            lent[team] += 1
    cohort_quota = unreserved + sum(use.lendable for use in uses)
    cohort_used = sum(max(use.used - (use.reserved - use.lendable), 0) for use in uses)
    return PoolLending(
        unreserved=unreserved,
        borrowed_by_team=borrowed,
        lent_by_team={team: gpus for team, gpus in lent.items() if gpus},
        from_lenders=from_lenders,
        borrowable=max(cohort_quota - cohort_used, 0),
        cohort_quota=cohort_quota,
    )


def available_to(use: TeamUse, *, quota: int, cohort_free: int) -> int:
    """GPUs `use`'s team can still be admitted on in the pool now, as Kueue counts them (v0.17,
    `pkg/cache/scheduler/resource_node.go` `available`): see the module docstring. `quota` is the team's quota in
    the pool, `cohort_free` the pool's `PoolLending.borrowable`. What Kueue's "N more needed" says of a workload of
    G GPUs is `G − available_to(...)` (negative only for a team above its quota, as Kueue's is)."""
    guaranteed = use.reserved - use.lendable
    local = max(guaranteed - use.used, 0)
    used_in_cohort = max(use.used - guaranteed, 0)
    borrowing_limit = max(quota - use.reserved, 0)
    return local + min(use.lendable - used_in_cohort + borrowing_limit, cohort_free)


def most_available_to(use: TeamUse, *, quota: int, cohort_quota: int) -> int:
    """The most GPUs `use`'s team can ever be admitted on in the pool with its reservations of now: `available_to`
    with none of its own GPUs in use and the cohort's whole quota free (every other team's borrowing ended, as it
    does when their jobs end). A job above it waits for ever; one within it but above `available_to` waits for its
    team's jobs or for other teams' borrowed GPUs."""
    idle = TeamUse(team_id=use.team_id, reserved=use.reserved, lendable=use.lendable)
    return available_to(idle, quota=quota, cohort_free=cohort_quota)


def team_uses(pool_ids: list[int] | None = None, *, now: datetime | None = None) -> dict[int, dict[int, TeamUse]]:
    """Per pool (all of them when `pool_ids` is None) and team: GPUs reserved there now, how many of them it lends, how
    many its jobs use there (`JobQuerySet.in_use`: in the pool that admitted them). Two queries."""
    from jobs.models import Job

    from .models import Pool, Reservation

    now = now or timezone.now()
    pools = Pool.objects.all() if pool_ids is None else Pool.objects.filter(pk__in=pool_ids)
    rows: dict[int, dict[int, dict]] = {}
    for reservation in (
        Reservation.objects.filter(pool__in=pools)
        .active_at(now)
        .only("team", "pool", "gpus", "lending", "protected_gpus")
    ):
        row = rows.setdefault(reservation.pool_id, {}).setdefault(
            reservation.team_id, {"reserved": 0, "lendable": 0, "used": 0}
        )
        row["reserved"] += reservation.gpus
        row["lendable"] += reservation.lendable_gpus
    for (team_id, pool_id), total in Job.objects.gpus_in_use(pools=pools.values("pk")).items():
        rows.setdefault(pool_id, {}).setdefault(team_id, {"reserved": 0, "lendable": 0, "used": 0})["used"] = total
    return {
        pool_id: {team_id: TeamUse(team_id=team_id, **row) for team_id, row in teams.items()}
        for pool_id, teams in rows.items()
    }


def pool_lending(
    pool_ids: list[int] | None = None,
    *,
    pools: list | None = None,
    now: datetime | None = None,
    uses: dict | None = None,
) -> dict[int, PoolLending]:
    """`PoolLending` per pool (all of them when `pool_ids` and `pools` are None; `pools`: Pool rows the caller has
    loaded already). Up to four queries; fewer when the caller passes the pools, or the `team_uses` of the same
    pools."""
    from pools.projection import gpus_per_node_by_pool

    from .models import Pool

    if pools is None:
        pools = list(Pool.objects.all() if pool_ids is None else Pool.objects.filter(pk__in=pool_ids))
    else:
        pool_ids = [pool.pk for pool in pools]
    uses = team_uses(pool_ids, now=now) if uses is None else uses
    per_node = None
    result = {}
    for pool in pools:
        pool_uses = list(uses.get(pool.pk, {}).values())
        if pool.kind == PoolKind.RESERVED:
            reserved = sum(use.reserved for use in pool_uses)
            unreserved = max((pool.contracted_gpus or 0) - reserved, 0)
        else:
            per_node = per_node if per_node is not None else gpus_per_node_by_pool(pools)
            unreserved = pool.max_nodes * per_node.get(pool.pk, 0)
        result[pool.pk] = split_pool(unreserved=unreserved, uses=pool_uses)
    return result


def reservation_lending(reservations, lending: dict[int, PoolLending]) -> dict[int, dict]:
    """Per reservation (active ones in `lending`'s pools): GPUs lent now and to how many teams. A team's lent GPUs in
    a pool are given to its reservations there in order of start, each up to what it lends."""
    rows: dict[int, dict] = {}
    remaining: dict[tuple[int, int], int] = {}
    for reservation in sorted(reservations, key=lambda r: (r.starts_at, r.pk)):
        pool = lending.get(reservation.pool_id)
        if pool is None:
            continue
        key = (reservation.team_id, reservation.pool_id)
        left = remaining.setdefault(key, pool.lent_by_team.get(reservation.team_id, 0))
        gpus = min(left, reservation.lendable_gpus)
        remaining[key] = left - gpus
        rows[reservation.pk] = {
            "lent_gpus": gpus,
            "borrowing_teams": pool.borrowers_other_than(reservation.team_id) if gpus else 0,
        }
    return rows
