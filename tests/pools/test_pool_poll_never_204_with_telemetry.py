"""The pools dashboard's poll answers an empty 204 while nothing changed (README, "Live pages stay light"), also
where DCGM telemetry is on. Users of any install with Prometheus set downloaded the whole fragment (about 20 KB at
1,000 nodes) at every 10 s poll although no figure had changed: each card printed its reading's age ("DCGM, 5 seconds
ago"), so the digest of the cards' markup changed with the clock. The card now sends the reading's moment in a
`<time>` (static/js/reservoir.js shows its age), and the version changes when a new reading arrives."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from monitoring.choices import Scope
from monitoring.models import UtilisationSample
from tests.factories import NodeFactory, PoolFactory

HTMX = {"HTTP_HX_REQUEST": "true"}


def reading(pool, at, util):
    return UtilisationSample.objects.create(scope=Scope.POOL, pool=pool, at=at, gpus=8, gpus_busy=0, util_avg=util)


def version_of(fragment: str) -> str:
    return re.search(r'hx-get="[^"?]*\?since=([0-9a-f]+)"', fragment)[1]


@pytest.mark.django_db
def test_the_poll_gets_204_while_nothing_changed_with_telemetry_on(client, researcher):
    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False):
        pool = PoolFactory(slug="train", name="Train Pool", contracted_gpus=8)
        NodeFactory(pool=pool, name="node-a")
        # The collector's last step for the pool, 5 s ago (a step a minute: always under a minute old).
        reading(pool, start - timedelta(seconds=5), 42.0)
        client.force_login(researcher)
        fragment = client.get(reverse("pools:pool_list"), **HTMX).content.decode()

    # The next poll, 10 s later: same nodes, same pods, same reading.
    with time_machine.travel(start + timedelta(seconds=10), tick=False):
        again = client.get(reverse("pools:pool_list"), {"since": version_of(fragment)}, **HTMX)
    assert again.status_code == 204, "nothing changed but the reading's age: the whole fragment was sent again"
    # The card names the reading's moment (the age is the browser's), with its figure.
    assert "Utilisation</dt><dd>42 %" in fragment
    assert re.search(r'DCGM, <time datetime="[^"]+" title="[^"]+ UTC" data-age>\d\d:\d\d:\d\d UTC</time>', fragment)

    # Control: the collector's next step, even with the same figure, is a new reading, and the poll after it gets it.
    with time_machine.travel(start + timedelta(seconds=60), tick=False):
        reading(pool, start + timedelta(seconds=55), 42.0)
        newer = client.get(reverse("pools:pool_list"), {"since": version_of(fragment)}, **HTMX)
    assert newer.status_code == 200 and version_of(newer.content.decode()) != version_of(fragment)
