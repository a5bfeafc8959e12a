"""What a save may not change once a team or a pool exists (`pools.teams.save_team`, `pools.services.save_pool`).

A team's slug names its namespace, ClusterQueue and LocalQueue, a pool's its Kueue flavor and unreserved queue: a
namespace cannot be renamed, and admitted workloads name the flavor, so a new slug would leave the jobs, pods and
usage already there belonging to nothing. A pool's kind decides how its usage is billed (reserved R/U/O, or spill),
and past days are metered again from it. Names change freely."""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from portal.models import Team

from .models import Pool


def check_team(*, stored: Team, team: Team) -> None:
    """Raise a field error when `team` changes what `stored`, its row as saved, fixes."""
    if stored.slug != team.slug:
        message = _(
            "A team's slug names its namespace and queues in the cluster (%(namespace)s) and cannot change once the "
            "team exists; change its name instead."
        )
        raise ValidationError({"slug": message % {"namespace": stored.namespace}})


def check_pool(*, stored: Pool, pool: Pool) -> None:
    """Raise a field error when `pool` changes what `stored`, its row as saved, fixes."""
    if stored.slug != pool.slug:
        message = _(
            "A pool's slug names its flavor and queue in the cluster (%(slug)s) and cannot change once the pool "
            "exists; change its name instead."
        )
        raise ValidationError({"slug": message % {"slug": stored.slug}})
    if stored.kind != pool.kind and _has_history(stored):
        message = _(
            "%(pool)s already has reservations, jobs or usage as a %(kind)s pool: its kind cannot change (it decides "
            "how that usage is billed). Make a new pool instead."
        )
        raise ValidationError({"kind": message % {"pool": stored.name, "kind": stored.get_kind_display()}})


def _has_history(pool: Pool) -> bool:
    return pool.reservations.exists() or pool.jobs.exists() or pool.usage_intervals.exists()
