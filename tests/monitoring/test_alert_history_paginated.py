"""Every resolved alert can be reached from the alerts page, 50 a page, newest first: the page showed only the 50
newest, with no page links (PRODUCT.md: "Alerts: active and past alerts with their rule and value")."""

from datetime import UTC, datetime, timedelta

import pytest

from monitoring.choices import AlertKind, AlertState
from monitoring.models import Alert
from tests.factories import PoolFactory

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def resolved_alerts(db):
    pool = PoolFactory(slug="train", name="Train Pool")
    alerts = []
    for minute in range(60):
        at = NOW - timedelta(minutes=minute)
        alerts.append(
            Alert.objects.create(
                kind=AlertKind.GPU_UTILISATION_LOW,
                subject_key=f"pool:train:{minute}",
                subject=f"pool Train Pool #{minute}",
                pool=pool,
                state=AlertState.RESOLVED,
                value=10,
                peak_value=5,
                threshold=30,
                summary="s",
                active_since=at - timedelta(hours=1),
                fired_at=at - timedelta(minutes=30),
                resolved_at=at,
                last_evaluated_at=at,
            )
        )
    return alerts  # newest first


def test_every_resolved_alert_can_be_reached_from_the_alerts_page(client, researcher, resolved_alerts):
    client.force_login(researcher)
    oldest = resolved_alerts[-1]
    link = f'href="/alerts/{oldest.pk}/"'
    pages = [client.get("/alerts/").content.decode()]
    pages += [client.get("/alerts/", {"page": number}).content.decode() for number in (2, 3)]
    assert any(link in page for page in pages), "the 51st newest resolved alert is on no page of /alerts/"
