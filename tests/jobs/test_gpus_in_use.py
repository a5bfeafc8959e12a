"""GPUs in use, one rule (`JobQuerySet.in_use`): a job holds GPUs from its admission on, in the pool that admitted
it (Kueue's flavor), not in its home pool; a queued job holds none. Every page, API and check reads it the same way,
and the pending page's reason (Kueue's "N more needed") and hint ("starts when N GPUs ... are freed") say the same N.
"""

import io
import re
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from dashboard.selectors import team_usage
from jobs import services as job_services
from jobs.choices import JobState, Placement
from jobs.models import Job, Workload
from pools import services as pool_services
from pools.choices import PoolKind
from pools.lending import team_uses
from pools.models import Pool, Quota
from portal.models import Team, User
from tests.factories import JobFactory, PoolFactory, QuotaFactory


@pytest.fixture
def lending_case(team, other_team):
    """Team alpha's home pool is X (reserved); its soft job of 6 GPUs was admitted on Y (elastic), its strict job of
    2 GPUs on X; a queued job of 4 GPUs homed X holds nothing yet."""
    home = PoolFactory(slug="pool-x", name="Pool X", kind=PoolKind.RESERVED, contracted_gpus=16)
    spill = PoolFactory(slug="pool-y", name="Pool Y", kind=PoolKind.ELASTIC, contracted_gpus=None, gpus_per_node=8)
    home.spill_pools.set([spill])
    QuotaFactory(team=team, pool=home, max_gpus=8)
    QuotaFactory(team=team, pool=spill, max_gpus=8)
    soft = JobFactory(
        team=team, pool=home, placement=Placement.SOFT, state=JobState.RUNNING, gpus=6, admitted_pool=spill
    )
    strict = JobFactory(team=team, pool=home, state=JobState.RUNNING, gpus=2, admitted_pool=home)
    JobFactory(team=team, pool=home, state=JobState.QUEUED, gpus=4)
    return home, spill, soft, strict


def test_a_soft_job_counts_in_the_pool_that_admitted_it_not_its_home_pool(lending_case, team, platform_admin, client):
    home, spill, soft, strict = lending_case
    assert Job.objects.gpus_in_use() == {(team.pk, home.pk): 2, (team.pk, spill.pk): 6}
    assert set(Job.objects.in_use(pools=[spill])) == {soft}
    assert (soft.quota_pool_id, strict.quota_pool_id) == (spill.pk, home.pk)
    # The submit check, the lending split and the team page read the same figures.
    assert job_services.gpus_in_use(team=team, pool=home) == 2
    assert job_services.gpus_in_use(team=team, pool=spill) == 6
    uses = team_uses([home.pk, spill.pk])
    assert (uses[home.pk][team.pk].used, uses[spill.pk][team.pk].used) == (2, 6)
    pools = {row["pool"].slug: row["in_use"] for row in team_usage(team, now=timezone.now())["pools"]}
    assert pools == {"pool-x": 2, "pool-y": 6}
    # The quota API.
    client.force_login(platform_admin)
    quotas = client.get("/api/v1/quotas/").json()["results"]
    assert {row["pool"]: row["gpus_in_use"] for row in quotas} == {"pool-x": 2, "pool-y": 6}
    # A quota's change answers with the same figure (read under the team's lock by set_quota, not read again).
    changed = client.patch(f"/api/v1/quotas/{quotas[1]['id']}/", {"max_gpus": 7}, content_type="application/json")
    assert changed.status_code == 200 and (changed.json()["pool"], changed.json()["gpus_in_use"]) == ("pool-y", 6)
    same = client.post("/api/v1/quotas/", {"team": team.slug, "pool": "pool-x", "max_gpus": 9})
    assert same.status_code == 200 and (same.json()["max_gpus"], same.json()["gpus_in_use"]) == (9, 2)


def test_a_quota_may_go_down_to_what_the_team_holds_in_that_pool(lending_case, team):
    home, spill, _soft, _strict = lending_case
    pool_services.set_quota(team=team, pool=home, max_gpus=2)  # the soft job's 6 GPUs are held in Y, not here
    with pytest.raises(ValidationError, match="use 6 GPUs of Pool Y"):
        pool_services.set_quota(team=team, pool=spill, max_gpus=5)


def test_an_admitted_job_whose_flavor_is_not_recorded_counts_in_its_home_pool(team):
    pool = PoolFactory(slug="pool-x")
    JobFactory(team=team, pool=pool, state=JobState.PENDING, gpus=3)
    JobFactory(team=team, pool=pool, state=JobState.SUCCEEDED, gpus=5, admitted_pool=pool)
    assert Job.objects.gpus_in_use() == {(team.pk, pool.pk): 3}


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\b(\d+) (?:more )?GPUs", text)]


def test_the_pending_pages_reason_and_hint_say_the_same_number_on_the_demo(db, client):
    """The demo's reserved A800 pool (32 GPUs: LLM reserves 16 with a quota of 20, Vision 8; 8 unreserved; both
    lend their idle GPUs, the default). Vision may use 16 (an admin raised its quota) and runs 14: its 8 and 6
    borrowed. LLM runs 18: its 16 and 2 borrowed. The cohort's 32 lendable GPUs are all in use, so Kueue can admit
    nothing more of LLM's there (v0.17 `available`: min(16 − 18 + 4, 32 − 32) = 0) and says of a queued 8-GPU job
    "8 more needed"; its quota alone (20 − 18) would leave 2, and the hint used to say 6."""
    call_command("seed_demo", stdout=io.StringIO())
    a800 = Pool.objects.get(slug="reserved-a800")
    llm, vision = Team.objects.get(slug="llm"), Team.objects.get(slug="vision")
    pool_services.set_quota(team=vision, pool=a800, max_gpus=16)
    for team, sizes in ((vision, (8, 6)), (llm, (8, 8, 2))):
        for gpus in sizes:
            JobFactory(team=team, pool=a800, state=JobState.RUNNING, gpus=gpus, admitted_pool=a800)
    lead = User.objects.get(username="llm-lead")
    queued = JobFactory(team=llm, pool=a800, state=JobState.QUEUED, gpus=8, name="llm-next", submitted_by=lead)
    Workload.objects.create(
        uid="w-llm-next",
        namespace=llm.namespace,
        name="job-llm-next",
        job=queued,
        message="couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "reserved-a800, 8 more needed",
        created_at=queued.created_at - timedelta(seconds=1),
    )
    client.force_login(lead)
    row = next(row for row in client.get(reverse("jobs:pending")).context["overview"].page if row.job_id)
    assert "8 more GPUs needed than the team's reservation and what it may borrow" in row.reason
    assert row.hint == "starts when 8 GPUs of the team's reservation or of what it may borrow are freed"
    assert _numbers(row.reason) == _numbers(row.hint) == [8]


def test_when_the_quota_binds_the_hint_says_so_with_kueues_number(team):
    """Alpha lends nothing and runs its whole reservation plus 2 borrowed GPUs; the pool has unreserved GPUs free.
    A queued 4-GPU job: Kueue's available = (8 − 8) + min(0 − 2 + 4, 8 − 2) = 2, so "2 more needed", which is what
    the quota alone leaves too (8 + 2 + 4 − 12)."""
    from jobs.selectors import quota_room

    pool = PoolFactory(slug="pool-x", contracted_gpus=16)
    now = timezone.now()
    reservation = pool_services.create_reservation(
        team=team, pool=pool, gpus=8, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=30)
    )
    pool_services.set_lending(reservation=reservation, lending="none")
    Quota.objects.update_or_create(team=team, pool=pool, defaults={"max_gpus": 12})
    JobFactory(team=team, pool=pool, state=JobState.RUNNING, gpus=10, admitted_pool=pool)
    quotas = {(team.pk, pool.pk): 12}
    assert quota_room([(team.pk, pool.pk)], quotas=quotas) == {(team.pk, pool.pk): (10, 2)}
    from jobs.reasons import quota_hint

    assert quota_hint(in_use=10, quota=12, gpus=4, available=2) == "starts when 2 GPUs of the team's quota are freed"
