"""Two Django admin pages save through a service keyed by the row's owner fields, and let those fields be edited on an
existing row: the alert rule page (kind, pool, team; `monitoring.services.set_rule`) and the namespace limits page
(team; `pools.services.set_namespace_limits`). An admin who changed an alert override's pool, or a limits row's team,
got a second row for the new pool or team (the limits one with only the fields the form saw change, written into that
team's namespace) while the row edited stayed as it was. Those fields are now read-only once the row exists, as on
the quota and reservation pages: another pool or team is another row, made with "Add"."""

from decimal import Decimal

import pytest

from monitoring import services as monitoring_services
from monitoring.choices import AlertKind
from monitoring.models import AlertRule
from pools import services as pool_services
from pools.models import NamespaceLimits
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pools(db):
    training = PoolFactory(slug="train", name="Training", contracted_gpus=16)
    return training, PoolFactory(slug="infer", name="Inference", contracted_gpus=16)


def _rule_form(rule, **changes):
    fields = {"kind": rule.kind, "pool": rule.pool_id or "", "team": rule.team_id or "", "threshold": "45"}
    fields.update(for_seconds="0", severity=rule.severity, enabled="on")
    return {**fields, **changes}


def test_editing_an_alert_overrides_pool_makes_no_second_override(client, platform_admin, pools):
    training, inference = pools
    rule = monitoring_services.set_rule(
        kind=AlertKind.QUEUE_WAIT, threshold=Decimal("45"), for_seconds=0, pool=training, user=platform_admin
    )
    client.force_login(platform_admin)
    page = client.get(f"/admin/monitoring/alertrule/{rule.pk}/change/")
    assert page.status_code == 200 and not {"kind", "pool", "team"} & set(page.context["adminform"].form.fields)

    answer = client.post(
        f"/admin/monitoring/alertrule/{rule.pk}/change/", _rule_form(rule, pool=inference.pk, threshold="60")
    )

    assert answer.status_code == 302
    overrides = list(AlertRule.objects.filter(kind=AlertKind.QUEUE_WAIT, pool__isnull=False).values_list("pk", "pool"))
    assert overrides == [(rule.pk, training.pk)], f"one rule edited, overrides now (pk, pool id): {overrides}"
    rule.refresh_from_db()
    assert rule.threshold == Decimal("60")  # the row edited is the row changed


def test_a_new_override_still_names_its_pool(client, platform_admin, pools):
    _, inference = pools
    client.force_login(platform_admin)
    page = client.get("/admin/monitoring/alertrule/add/")
    assert {"kind", "pool", "team"} <= set(page.context["adminform"].form.fields)
    answer = client.post(
        "/admin/monitoring/alertrule/add/",
        {"kind": AlertKind.QUEUE_WAIT, "pool": inference.pk, "team": "", "threshold": "20", "for_seconds": "0"}
        | {"severity": "warning", "enabled": "on"},
    )
    assert answer.status_code == 302
    assert AlertRule.objects.get(kind=AlertKind.QUEUE_WAIT, pool=inference).threshold == Decimal("20")


def test_editing_a_limits_rows_team_makes_no_second_row(client, platform_admin, team, other_team):
    limits = pool_services.set_namespace_limits(team=team, max_pods=50, user=platform_admin)
    client.force_login(platform_admin)
    page = client.get(f"/admin/pools/namespacelimits/{limits.pk}/change/")
    form = page.context["adminform"].form
    assert "team" not in form.fields
    data = {name: ("" if value is None else value) for name, value in form.initial.items() if name in form.fields}
    data.update(team=other_team.pk, max_pods=60)

    answer = client.post(f"/admin/pools/namespacelimits/{limits.pk}/change/", data)

    assert answer.status_code == 302
    rows = list(NamespaceLimits.objects.values_list("pk", "team__slug", "max_pods").order_by("pk"))
    assert rows == [(limits.pk, "alpha", 60)], f"one limits row edited, now (pk, team, max_pods): {rows}"


def test_new_limits_still_name_their_team(client, platform_admin, team):
    client.force_login(platform_admin)
    assert "team" in client.get("/admin/pools/namespacelimits/add/").context["adminform"].form.fields
