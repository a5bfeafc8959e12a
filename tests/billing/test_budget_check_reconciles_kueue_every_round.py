"""The budget controller (`reconcile.budget.check_budgets`, every few seconds) reconciles the whole Kueue projection
when `_projection_behind` says a team's ClusterQueue does not yet check the flavors its budget says. It used to decide
that by looking for a *reserved* flavor among the queue's checked flavors, so in a cluster without reserved pools
(elastic and shared only) a team whose budget was reached was "behind" for ever: every round, right after a reconcile
that had written exactly what the portal wants, it ran `kueue.reconcile()` again (six cluster-wide LISTs, the advisory
lock every other Kueue reconcile waits on, the state row rewritten), for the rest of the month.

It now compares the queue with what the projection renders (`cluster.kueue.budget_flavors`). Pure: the queue the
projection renders for the team stands for what the cluster holds; no cluster."""

from dataclasses import replace
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.budget import BudgetStatus
from cluster import kueue as render
from pools import projection, services
from pools.choices import PoolKind
from reconcile import budget
from tests.factories import PoolFactory, TeamFactory


def reached_budget(team) -> dict[int, BudgetStatus]:
    month = timezone.now().date().replace(day=1)
    status = BudgetStatus(team_id=team.pk, month=month, cap=Decimal("100"), spent=Decimal("250"))
    assert status.reached
    return {team.pk: status}


def queues_rendered(team, **budget) -> dict[str, dict]:
    """The team's ClusterQueue as the projection renders it with `budget` (what the last reconcile wrote)."""
    pools, teams = projection.desired_specs(timezone.now())
    spec = replace(next(t for t in teams if t.slug == team.slug), **budget)
    queue = render.render_team_cluster_queue(spec, render.flavor_order(pools))
    return {queue["metadata"]["name"]: queue}


@pytest.fixture
def elastic_only():
    spot = PoolFactory(slug="spot", kind=PoolKind.ELASTIC, contracted_gpus=None, max_nodes=4, gpus_per_node=8)
    team = TeamFactory(slug="llm")
    services.set_quota(team=team, pool=spot, max_gpus=8)
    return team


@pytest.mark.django_db
def test_a_queue_rendered_as_the_budget_says_is_not_behind_in_a_cluster_without_reserved_pools(elastic_only):
    team = elastic_only
    queues = queues_rendered(team, budget_checked=True, budget_reached=True)

    assert not budget._projection_behind(reached_budget(team), queues, {team.pk: team.slug}), (
        "the queue already holds what the projection renders, yet the controller would reconcile Kueue again "
        "(and again every round)"
    )


@pytest.mark.django_db
def test_a_queue_rendered_before_the_budget_is_behind(elastic_only):
    """Positive control: a queue that does not check the spot flavor yet (rendered before the team had a budget) is
    behind, and so is one rendered before a reserved pool's budget was reached."""
    team = elastic_only
    assert budget._projection_behind(reached_budget(team), queues_rendered(team), {team.pk: team.slug})

    PoolFactory(slug="a800", kind=PoolKind.RESERVED, contracted_gpus=16)
    before = queues_rendered(team, budget_checked=True, budget_reached=False)  # checks spot only
    assert budget._projection_behind(reached_budget(team), before, {team.pk: team.slug})
    after = queues_rendered(team, budget_checked=True, budget_reached=True)  # checks a800 and spot
    assert not budget._projection_behind(reached_budget(team), after, {team.pk: team.slug})
