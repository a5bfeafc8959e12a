"""Pools, reservations and quotas at their edges: a change the services refuse comes back as Django admin's form with
its message (not a 500), spill pools set in admin go through the service (checked and audited), a quota covers the
team's reservations from now on, a quota request approved after the quota changed is refused, a pool is deleted only
without quotas or pending requests, a quota deleted in admin is reconciled, and a reservation's end is bounded."""

# ruff: noqa: E501

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from pools import services
from pools.choices import PoolKind
from pools.models import Quota, QuotaRequest
from portal.models import AuditEntry
from tests.factories import PoolFactory, QuotaFactory, ReservationFactory


def _admin_form_data(client, url):
    response = client.get(url)
    assert response.status_code == 200
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name)
        bound = form[name]
        # let the widget render its own names (split datetime etc.)
        value = bound.value()
        if hasattr(field, "fields"):  # MultiValueField
            parts = field.widget.decompress(value)
            for i, part in enumerate(parts):
                data[f"{name}_{i}"] = "" if part is None else str(part)
            continue
        if value is None:
            value = ""
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        data[name] = value
    for formset in response.context["inline_admin_formsets"]:
        prefix = formset.formset.prefix
        for key in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS"):
            data[f"{prefix}-{key}"] = "0"
    return data


def test_admin_extending_a_reservation_beyond_the_contract_is_a_form_error_not_a_500(
    client, platform_admin, team, other_team
):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    now = timezone.now().replace(microsecond=0, second=0)
    mine = ReservationFactory(
        team=team, pool=pool, gpus=10, starts_at=now - timedelta(days=1), ends_at=now + timedelta(days=10)
    )
    ReservationFactory(
        team=other_team, pool=pool, gpus=10, starts_at=now + timedelta(days=10), ends_at=now + timedelta(days=40)
    )
    client.force_login(platform_admin)
    client.raise_request_exception = False
    url = reverse("admin:pools_reservation_change", args=[mine.pk])
    data = _admin_form_data(client, url)
    later = timezone.localtime(now + timedelta(days=20))
    data["ends_at_0"] = later.strftime("%Y-%m-%d")
    data["ends_at_1"] = later.strftime("%H:%M:%S")
    try:
        response = client.post(url, data)
    except ValidationError as error:
        pytest.fail(f"500: the service's ValidationError escaped the admin's save_model: {error}")
    mine.refresh_from_db()
    assert mine.ends_at == now + timedelta(days=10)
    assert response.status_code == 200, response.status_code  # the form again, with the contract's message


def test_admin_quota_below_the_reservation_is_a_form_error_not_a_500(client, platform_admin, team):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    ReservationFactory(team=team, pool=pool, gpus=8)
    client.force_login(platform_admin)
    client.raise_request_exception = False
    url = reverse("admin:pools_quota_add")
    try:
        response = client.post(url, {"team": team.pk, "pool": pool.pk, "max_gpus": "2"})
    except ValidationError as error:
        pytest.fail(f"500: the service's ValidationError escaped the admin's save_model: {error}")
    assert not Quota.objects.exists()
    assert response.status_code == 200, response.status_code


def test_admin_lowering_a_contract_below_reservations_is_a_form_error_not_a_500(client, platform_admin, team):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    ReservationFactory(team=team, pool=pool, gpus=12)
    client.force_login(platform_admin)
    client.raise_request_exception = False
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    data = _admin_form_data(client, url)
    data["contracted_gpus"] = "8"
    try:
        response = client.post(url, data)
    except ValidationError as error:
        pytest.fail(f"500: the service's ValidationError escaped the admin's save_model: {error}")
    pool.refresh_from_db()
    assert pool.contracted_gpus == 16
    assert response.status_code == 200, response.status_code


def test_admin_spill_pools_change_is_in_the_audit_after(client, platform_admin):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    elastic = PoolFactory(slug="spot", kind=PoolKind.ELASTIC, contracted_gpus=None)
    client.force_login(platform_admin)
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    data = _admin_form_data(client, url)
    data["spill_pools"] = [str(elastic.pk)]
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert list(pool.spill_pools.values_list("slug", flat=True)) == ["spot"]
    entry = AuditEntry.objects.filter(action="pool.update").latest("id")
    assert entry.after["spill_pools"] == ["spot"], (entry.before.get("spill_pools"), entry.after.get("spill_pools"))


def test_admin_a_pool_cannot_spill_into_itself(client, platform_admin):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    client.force_login(platform_admin)
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    data = _admin_form_data(client, url)
    data["spill_pools"] = [str(pool.pk)]
    client.post(url, data)
    assert not pool.spill_pools.filter(pk=pool.pk).exists()


# --- quota vs reservation ----------------------------------------------------------------------------------------


def test_a_quota_may_not_be_lowered_below_a_reservation_that_starts_later(team, platform_admin):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    now = timezone.now()
    ReservationFactory(
        team=team, pool=pool, gpus=8, starts_at=now + timedelta(hours=1), ends_at=now + timedelta(days=30)
    )
    with pytest.raises(ValidationError):
        services.set_quota(team=team, pool=pool, max_gpus=0, user=platform_admin)


# --- quota requests ------------------------------------------------------------------------------------------------


def test_approving_a_request_after_the_quota_changed_does_not_silently_undo_the_change(team, lead, platform_admin):
    pool = PoolFactory(slug="train", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    asked = services.request_quota_change(team=team, pool=pool, max_gpus=8, reason="More runs.", user=lead)
    assert asked.previous_max_gpus == 4
    services.set_quota(team=team, pool=pool, max_gpus=12, user=platform_admin)  # meanwhile, an admin raises it
    with pytest.raises(ValidationError, match="The quota changed since this request was made"):
        services.approve_quota_request(request=asked, user=platform_admin)
    # the lead asked for more (4 -> 8): approving it would have cut the team from 12 to 8
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 12
    assert QuotaRequest.objects.get().state == "pending"


def test_a_pool_with_quotas_or_pending_requests_is_not_deleted(team, lead, platform_admin):
    pool = PoolFactory(slug="spare", kind=PoolKind.ELASTIC, contracted_gpus=None)
    quota = QuotaFactory(team=team, pool=pool, max_gpus=4)
    services.request_quota_change(team=team, pool=pool, max_gpus=8, reason="More runs.", user=lead)
    with pytest.raises(ValidationError, match="remove or decide them first"):
        services.delete_pool(pool=pool, user=platform_admin)
    services.delete_quota(quota=quota, user=platform_admin)
    with pytest.raises(ValidationError, match="remove or decide them first"):  # the request is still pending
        services.delete_pool(pool=pool, user=platform_admin)
    services.reject_quota_request(request=QuotaRequest.objects.get(), user=platform_admin, note="Not this pool.")
    services.delete_pool(pool=pool, user=platform_admin)
    assert set(AuditEntry.objects.values_list("action", flat=True)) >= {"quota.delete", "pool.delete"}


def test_admin_deleting_a_quota_marks_the_namespace_and_kueue_changed(
    client, platform_admin, team, django_capture_on_commit_callbacks
):
    from pools import projection
    from pools.models import TeamNamespace

    pool = PoolFactory(slug="a800", contracted_gpus=16)
    quota = services.set_quota(team=team, pool=pool, max_gpus=4, user=platform_admin)
    TeamNamespace.objects.filter(team=team).update(applied_version=models_F("desired_version"))
    assert projection.namespace_state(team.pk)["applied"]
    client.force_login(platform_admin)
    url = reverse("admin:pools_quota_delete", args=[quota.pk])
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Quota.objects.exists()
    # the cluster's ResourceQuota still holds 4 GPUs: the namespace must not read as applied
    assert not projection.namespace_state(team.pk)["applied"], "quota deleted in admin, namespace still 'applied'"


def models_F(name):
    from django.db.models import F

    return F(name)


def test_api_reservation_ending_in_9999_answers_400_not_500(platform_admin, team):
    from rest_framework.test import APIClient

    PoolFactory(slug="a800", contracted_gpus=16)
    client = APIClient()
    client.force_login(platform_admin)
    client.raise_request_exception = False
    body = {
        "team": "alpha",
        "pool": "a800",
        "gpus": 4,
        "starts_at": "2027-01-01T00:00:00Z",
        "ends_at": "9999-12-31T00:00:00Z",
    }
    try:
        response = client.post("/api/v1/reservations/", body, format="json")
    except OverflowError as error:
        pytest.fail(f"500: {error!r}")
    assert response.status_code == 400, response.status_code


def test_admin_changing_a_quotas_team_changes_that_row(client, platform_admin, team, other_team):
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    quota = services.set_quota(team=team, pool=pool, max_gpus=4, user=platform_admin)
    client.force_login(platform_admin)
    url = reverse("admin:pools_quota_change", args=[quota.pk])
    response = client.post(url, {"team": other_team.pk, "pool": pool.pk, "max_gpus": "4"})
    assert response.status_code in (200, 302)
    rows = sorted(Quota.objects.values_list("team__slug", "max_gpus"))
    # either refused (the form again) or the row moved: never a second row while the first stays as it was
    assert rows == [("alpha", 4)], rows  # team and pool are read-only on a quota's page


def test_a_reservation_raises_the_teams_quota_to_cover_it(team, platform_admin):
    """A quota is the team's reservation plus any extra: a reservation above it raises it (audited), so that Kueue,
    submission and the namespace's ResourceQuota give the team the same GPUs."""
    pool = PoolFactory(slug="a800", contracted_gpus=16)
    QuotaFactory(team=team, pool=pool, max_gpus=2)
    now = timezone.now()
    services.create_reservation(
        team=team, pool=pool, gpus=8, starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=30),
        user=platform_admin,
    )  # fmt: skip
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8
    entry = AuditEntry.objects.filter(action="quota.set").latest("id")
    assert (entry.before["max_gpus"], entry.after["max_gpus"], entry.actor) == (2, 8, platform_admin)
    # a second one, from day 20, overlaps the first: 12 at the peak
    services.create_reservation(
        team=team, pool=pool, gpus=4, starts_at=now + timedelta(days=20), ends_at=now + timedelta(days=60),
        user=platform_admin,
    )  # fmt: skip
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 12
    services.set_quota(team=team, pool=pool, max_gpus=16, user=platform_admin)  # extra above it stays
    services.create_reservation(
        team=team, pool=pool, gpus=2, starts_at=now + timedelta(days=70), ends_at=now + timedelta(days=80),
        user=platform_admin,
    )  # fmt: skip
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 16
