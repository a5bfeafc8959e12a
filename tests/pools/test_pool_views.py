"""The pools dashboard and pool page: capacity figures, GPU strips coloured by team (other teams anonymous),
fragmentation, htmx refresh, visibility and constant query counts."""

import gzip
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs.models import Pod
from pools.models import Node
from tests.factories import NodeFactory, PoolFactory, ReservationFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def pool(db):
    pool = PoolFactory(slug="train", name="Train Pool", contracted_gpus=24)
    NodeFactory(pool=pool, name="node-a")
    NodeFactory(pool=pool, name="node-b")
    NodeFactory(pool=pool, name="node-c", ready=False)
    return pool


def pod(name, node, gpus, team=None):
    return Pod.objects.create(
        uid=name,
        namespace="ns",
        name=name,
        node_name=node,
        gpus=gpus,
        team=team,
        phase="Running",
        scheduled=True,
        created_at="2026-01-01T00:00:00Z",
    )


@pytest.mark.parametrize("who", ["researcher", "lead", "platform_admin", "outsider"])
def test_every_signed_in_user_sees_every_pools_occupancy(client, request, pool, who):
    client.force_login(request.getfixturevalue(who))
    for url in (reverse("pools:pool_list"), reverse("pools:pool_detail", args=["train"])):
        assert client.get(url).status_code == 200
        assert client.get(url, **HTMX).status_code == 200


def test_anonymous_is_sent_to_login(client, pool):
    assert client.get(reverse("pools:pool_list")).status_code == 302
    # A live part's poll is sent to the sign-in page as a whole page (portal.middleware.HtmxSignInMiddleware).
    poll = client.get(reverse("pools:pool_detail", args=["train"]), **HTMX)
    assert poll.status_code == 200 and poll["HX-Redirect"].startswith("/login/?next=")


def test_unknown_pool_is_404(client, researcher, pool):
    client.force_login(researcher)
    assert client.get(reverse("pools:pool_detail", args=["nope"])).status_code == 404


def test_card_figures_contracted_live_allocated_free_and_utilisation(client, researcher, team, other_team, pool):
    pod("a1", "node-a", 4, team)
    pod("a2", "node-a", 2, other_team)
    pod("b1", "node-b", 8, team)
    ReservationFactory(team=team, pool=pool, gpus=12)
    client.force_login(researcher)
    html = client.get(reverse("pools:pool_list")).content.decode()
    assert "Contracted</dt><dd>24 GPUs" in html
    assert "Live capacity</dt>\n    <dd>16 GPUs" in html
    assert "8 contracted GPUs not live" in html
    assert "Allocated</dt><dd>14 GPUs" in html and "(88 % of live)" in html  # 14 of 16
    assert "Free</dt><dd>2 GPUs" in html
    assert "no DCGM telemetry in the last hour" in html
    assert "Reserved now</dt><dd>12 GPUs" in html
    assert "2 Ready · 1 NotReady" in html


def test_strips_colour_my_team_and_hide_other_teams(client, researcher, team, other_team, pool):
    pod("a1", "node-a", 4, team)
    pod("a2", "node-a", 2, other_team)
    client.force_login(researcher)
    html = client.get(reverse("pools:pool_list")).content.decode()
    assert 'aria-label="node-a: Alpha: 4 GPUs; another team: 2 GPUs; 2 GPUs free"' in html
    assert html.count('<i class="slot team-0"></i>') == 4
    assert html.count('<i class="slot other"></i>') == 2
    assert "Beta" not in html
    assert 'aria-label="node-c: not schedulable (NotReady or cordoned)"' in html


def test_the_admin_sees_every_team_by_name(client, platform_admin, team, other_team, pool):
    pod("a2", "node-a", 2, other_team)
    client.force_login(platform_admin)
    assert "Beta: 2 GPUs" in client.get(reverse("pools:pool_list")).content.decode()


def test_utilisation_comes_from_the_latest_dcgm_sample(client, researcher, pool):
    from datetime import timedelta

    from django.utils import timezone

    from monitoring.models import UtilisationSample

    now = timezone.now()
    for minutes, util in ((30, 12.0), (2, 63.4)):
        UtilisationSample.objects.create(
            scope="pool",
            pool=pool,
            at=now - timedelta(minutes=minutes),
            gpus=16,
            gpus_busy=10,
            util_avg=util,
            util_max=90.0,
        )
    client.force_login(researcher)
    html = client.get(reverse("pools:pool_list")).content.decode()
    assert "Utilisation</dt><dd>63 %" in html


def test_fragmentation_table(client, researcher, pool):
    pod("a", "node-a", 5, None)  # 3 free on node-a
    pod("b", "node-b", 6, None)  # 2 free on node-b
    client.force_login(researcher)
    html = client.get(reverse("pools:pool_detail", args=["train"])).content.decode()
    assert "Largest free block: 3 GPUs on one node" in html
    rows = {
        size: f'<tr><th scope="row">{label}</th><td class="num">{fits}</td><td class="num">{stranded}</td>'
        f'<td class="num">{gang_nodes}</td></tr>'
        # gang_nodes: nodes with at least `size` free GPUs, the largest multi-node job of that size that fits now.
        for size, label, fits, stranded, gang_nodes in [
            (1, "1 GPU", 5, "0 GPUs", 2),
            (2, "2 GPUs", 2, "1 GPU", 2),
            (4, "4 GPUs", 0, "5 GPUs", 0),
            (8, "8 GPUs", 0, "5 GPUs", 0),
        ]
    }
    for row in rows.values():
        assert row in html


def test_the_dashboard_refreshes_itself_and_the_fragment_is_only_the_cards(client, researcher, pool):
    client.force_login(researcher)
    page = client.get(reverse("pools:pool_list")).content.decode()
    assert 'hx-trigger="every 10s"' in page and "<html" in page
    fragment = client.get(reverse("pools:pool_list"), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="pool-cards"') and "<html" not in fragment


def test_the_dashboard_poll_gets_nothing_until_the_cards_change(client, researcher, team, pool):
    client.force_login(researcher)
    fragment = client.get(reverse("pools:pool_list"), **HTMX).content.decode()
    version = re.search(r'hx-get="[^"?]*\?since=([0-9a-f]+)"', fragment)[1]
    unchanged = client.get(reverse("pools:pool_list"), {"since": version}, **HTMX)
    assert unchanged.status_code == 204 and unchanged.content == b""
    pod("new-pod", "node-a", 2, team=team)
    changed = client.get(reverse("pools:pool_list"), {"since": version}, **HTMX)
    assert changed.status_code == 200 and "Alpha: 2 GPUs" in changed.content.decode()
    assert f"since={version}" not in changed.content.decode()
    # a full page load always answers the page, whatever it is given
    assert client.get(reverse("pools:pool_list"), {"since": version}).status_code == 200


def test_the_dashboard_at_100_nodes_goes_out_gzip_compressed(client, researcher, pool):
    Node.objects.bulk_create(Node(pool=pool, name=f"n-{i:03d}", gpu_capacity=8, gpu_allocatable=8) for i in range(100))
    client.force_login(researcher)
    plain = client.get(reverse("pools:pool_list"), **HTMX)
    compressed = client.get(reverse("pools:pool_list"), HTTP_ACCEPT_ENCODING="gzip", **HTMX)
    assert compressed["Content-Encoding"] == "gzip" and "Accept-Encoding" in compressed["Vary"]
    assert len(re.findall(r'class="strip(?: down)?"', gzip.decompress(compressed.content).decode())) == 103
    assert len(compressed.content) * 8 < len(plain.content)


def test_empty_states(client, researcher):
    client.force_login(researcher)
    assert b"No pools yet" in client.get(reverse("pools:pool_list")).content
    PoolFactory(slug="empty", name="Empty")
    assert b"No nodes seen for this pool yet" in client.get(reverse("pools:pool_detail", args=["empty"])).content


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries.captured_queries)


def test_dashboard_queries_do_not_grow_with_pools_nodes_and_pods(client, researcher, team, pool):
    client.force_login(researcher)
    few = _queries(client, reverse("pools:pool_list"))
    for p in range(5):
        other = PoolFactory(slug=f"p{p}", name=f"P{p}")
        Node.objects.bulk_create(
            [Node(name=f"p{p}-n{i}", pool=other, gpu_capacity=8, gpu_allocatable=8, ready=True) for i in range(40)]
        )
    Pod.objects.bulk_create(
        [
            Pod(
                uid=f"u{i}",
                namespace="ns",
                name=f"pod{i}",
                node_name=f"p{i % 5}-n{i % 40}",
                gpus=1,
                team=team,
                phase="Running",
                scheduled=True,
                created_at="2026-01-01T00:00:00Z",
            )
            for i in range(400)
        ]
    )
    assert _queries(client, reverse("pools:pool_list")) == few
