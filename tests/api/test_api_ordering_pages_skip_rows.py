"""Paging through an API list ordered by a value many rows share (`?ordering=max_gpus`, `?ordering=role`,
`?ordering=gpu_allocatable`, or a default order by names two teams can share) returns every row exactly once, as the
jobs list does (jobs/api/listing.py). DRF's OrderingFilter ordered by the asked fields alone, and PostgreSQL keeps no
order among tied rows from one LIMIT/OFFSET query to the next: an admin's script that walked 60 quotas of 8 GPUs page
by page saw 52 distinct ones, some twice, and never the other 8. The portal's OrderingFilter adds the primary key."""

from pools.models import Node, Pool, Quota
from portal.api.base import ordered_uniquely
from tests.factories import MembershipFactory, NodeFactory, PoolFactory, QuotaFactory, TeamFactory


def _walk(client, url: str) -> tuple[list, int]:
    """Every row's key over all pages of `url`, and the count the first page announced."""
    keys, page, count = [], 1, None
    while True:
        response = client.get(f"{url}&page={page}")
        assert response.status_code == 200, response.content
        data = response.json()
        count = data["count"] if count is None else count
        keys += [row.get("id") or row.get("slug") or row["name"] for row in data["results"]]
        if not data["next"]:
            return keys, count
        page += 1


def test_quotas_ordered_by_gpus_page_through_every_quota_once(api, platform_admin):
    pool = PoolFactory(slug="train")
    for _ in range(60):
        QuotaFactory(team=TeamFactory(), pool=pool, max_gpus=8)
    keys, count = _walk(api(platform_admin), "/api/v1/quotas/?ordering=max_gpus&page_size=3")
    assert count == 60
    assert len(keys) == 60
    assert len(set(keys)) == 60, f"{60 - len(set(keys))} quotas never listed, others listed twice"


def test_memberships_ordered_by_role_page_through_every_membership_once(api, platform_admin):
    team = TeamFactory()
    for _ in range(60):
        MembershipFactory(team=team)
    keys, count = _walk(api(platform_admin), "/api/v1/memberships/?ordering=role&page_size=3")
    assert count == 60
    assert len(set(keys)) == 60, f"{60 - len(set(keys))} memberships never listed, others listed twice"


def test_nodes_ordered_by_allocatable_gpus_page_through_every_node_once(api, platform_admin):
    pool = PoolFactory(slug="train")
    for _ in range(60):
        NodeFactory(pool=pool)
    keys, count = _walk(api(platform_admin), "/api/v1/nodes/?ordering=gpu_allocatable&page_size=3")
    assert count == 60
    assert len(set(keys)) == 60, f"{60 - len(set(keys))} nodes never listed, others listed twice"


def test_teams_sharing_a_name_page_through_every_team_once_in_the_default_order(api, platform_admin):
    for _ in range(30):
        TeamFactory(name="Vision")
    keys, count = _walk(api(platform_admin), "/api/v1/teams/?page_size=4")
    assert count == 30
    assert len(set(keys)) == 30, f"{30 - len(set(keys))} teams never listed, others listed twice"


def test_the_primary_key_breaks_ties_only_when_no_unique_field_orders_the_rows():
    assert ordered_uniquely(["max_gpus"], Quota) == ["max_gpus", "-id"]
    assert ordered_uniquely(["-team__slug"], Quota) == ["-team__slug", "-id"], "unique for the team, not the quota"
    assert ordered_uniquely(["name"], Pool) == ["name", "-id"]
    # A unique field already orders every row, so nothing is added.
    assert ordered_uniquely(["-slug", "name"], Pool) == ["-slug", "name"]
    assert ordered_uniquely(["gpu_allocatable", "name"], Node) == ["gpu_allocatable", "name"]
    assert ordered_uniquely(["-pk"], Quota) == ["-pk"]
