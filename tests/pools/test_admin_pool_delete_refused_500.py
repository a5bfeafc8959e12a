"""Deleting a pool that still had a team quota in Django admin: the delete page listed the quota as going with it and
asked "Are you sure?", and confirming answered 500 (the service refuses, and nothing caught it); the bulk "Delete
selected pools" action did the same. Now the delete page says why the pool cannot be deleted yet, as a team's does,
and a refusal the bulk delete meets comes back as an error message (docs/features.md: "In Django admin a change a
service refuses comes back as ... its message")."""

import pytest
from django.contrib.admin import ModelAdmin
from django.contrib.messages import ERROR

from pools.admin import PoolAdmin
from pools.choices import PoolKind
from pools.models import Pool
from portal.models import AuditEntry
from tests.factories import PoolFactory, QuotaFactory

pytestmark = pytest.mark.django_db

REFUSAL = "Training has team quotas or pending quota requests: remove or decide them first."


@pytest.fixture
def pool_with_a_quota(team):
    pool = PoolFactory(slug="train", name="Training", kind=PoolKind.ELASTIC, contracted_gpus=None)
    QuotaFactory(team=team, pool=pool, max_gpus=4)
    return pool


@pytest.fixture
def admin_client(client, platform_admin):
    client.force_login(platform_admin)
    client.raise_request_exception = False
    return client


def test_deleting_a_pool_with_quotas_in_admin_is_refused_with_its_reason(admin_client, pool_with_a_quota):
    page = admin_client.get(f"/admin/pools/pool/{pool_with_a_quota.pk}/delete/")
    assert page.status_code == 200 and REFUSAL in page.content.decode()
    answer = admin_client.post(f"/admin/pools/pool/{pool_with_a_quota.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 200, "the pool's delete confirmation answered 500"
    assert REFUSAL in answer.content.decode()
    assert Pool.objects.filter(pk=pool_with_a_quota.pk).exists()


def test_bulk_deleting_a_pool_with_quotas_in_admin_is_refused_with_its_reason(admin_client, pool_with_a_quota):
    answer = admin_client.post(
        "/admin/pools/pool/",
        {"action": "delete_selected", "_selected_action": [pool_with_a_quota.pk], "post": "yes"},
    )
    assert answer.status_code == 200, "the pools' bulk delete answered 500"
    assert REFUSAL in answer.content.decode()
    assert Pool.objects.filter(pk=pool_with_a_quota.pk).exists()


def test_a_refusal_met_by_the_bulk_delete_itself_is_an_error_message(admin_client, pool_with_a_quota, monkeypatch):
    # the confirmation page as it was before the quota came in: nothing held the pool then
    monkeypatch.setattr(PoolAdmin, "get_deleted_objects", ModelAdmin.get_deleted_objects)
    answer = admin_client.post(
        "/admin/pools/pool/",
        {"action": "delete_selected", "_selected_action": [pool_with_a_quota.pk], "post": "yes"},
        follow=True,
    )
    assert answer.status_code == 200
    assert (ERROR, REFUSAL) in [(message.level, message.message) for message in answer.context["messages"]]
    assert Pool.objects.filter(pk=pool_with_a_quota.pk).exists()


def test_a_pool_that_holds_nothing_is_deleted_and_audited(admin_client):
    pool = PoolFactory(slug="spare", name="Spare", kind=PoolKind.ELASTIC, contracted_gpus=None)
    page = admin_client.get(f"/admin/pools/pool/{pool.pk}/delete/")
    assert page.status_code == 200 and "remove or decide them first" not in page.content.decode()
    answer = admin_client.post(f"/admin/pools/pool/{pool.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert not Pool.objects.filter(pk=pool.pk).exists()
    assert AuditEntry.objects.filter(action="pool.delete", object_id=str(pool.pk)).exists()
