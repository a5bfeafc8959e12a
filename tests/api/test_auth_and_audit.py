"""API tokens (made and revoked by admins, stored hashed), the browser session, and the audit log of writes made
through the API and Django admin."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.authentication import hash_secret
from portal.models import ApiToken, AuditEntry, Membership
from tests.factories import NodeFactory, QuotaFactory


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_admin_makes_a_token_whose_secret_is_shown_once_and_stored_hashed(api, platform_admin, researcher, team):
    response = api(platform_admin).post("/api/v1/tokens/", {"user": "rita", "name": "nightly"}, format="json")
    assert response.status_code == 201
    secret = response.json()["token"]
    token = ApiToken.objects.get(pk=response.json()["id"])
    assert token.key_hash == hash_secret(secret) and secret not in token.key_hash
    assert "token" not in api(platform_admin).get(f"/api/v1/tokens/{token.pk}/").json()

    # The token acts as rita: her team, nothing else, and none of the admin's powers.
    as_rita = bearer(secret)
    assert [t["slug"] for t in as_rita.get("/api/v1/teams/").json()["results"]] == ["alpha"]
    assert as_rita.get("/api/v1/tokens/").status_code == 404
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


def test_the_answer_holding_a_new_tokens_secret_is_never_compressed_other_answers_are(api, platform_admin, researcher):
    """BREACH (portal/compression.py): the plaintext secret never goes out gzip-compressed."""
    client = api(platform_admin)
    made = client.post(
        "/api/v1/tokens/", {"user": "rita", "name": "nightly"}, format="json", HTTP_ACCEPT_ENCODING="gzip"
    )
    assert made.status_code == 201 and not made.has_header("Content-Encoding")
    assert made.json()["token"]
    for n in range(6):
        client.post("/api/v1/tokens/", {"user": "rita", "name": f"more-{n}"}, format="json")
    listed = client.get("/api/v1/tokens/", HTTP_ACCEPT_ENCODING="gzip")
    assert listed["Content-Encoding"] == "gzip"


def test_a_revoked_or_expired_token_authenticates_nobody(api, platform_admin, researcher):
    admin = api(platform_admin)
    made = admin.post("/api/v1/tokens/", {"user": "rita", "name": "ci"}, format="json").json()
    assert bearer(made["token"]).get("/api/v1/teams/").status_code == 200

    revoked = admin.post(f"/api/v1/tokens/{made['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["is_active"] is False
    assert bearer(made["token"]).get("/api/v1/teams/").status_code == 401

    soon = timezone.now() + timedelta(minutes=5)
    expiring = admin.post("/api/v1/tokens/", {"user": "rita", "name": "tmp", "expires_at": soon}, format="json").json()
    past = timezone.now() - timedelta(hours=1)
    ApiToken.objects.filter(pk=expiring["id"]).update(created_at=past, expires_at=past + timedelta(minutes=5))
    assert bearer(expiring["token"]).get("/api/v1/teams/").status_code == 401
    assert bearer("rsv_not-a-token").get("/api/v1/teams/").status_code == 401


def test_only_admins_make_or_revoke_tokens(api, platform_admin, lead, researcher):
    _made = api(platform_admin).post("/api/v1/tokens/", {"user": "rita", "name": "ci"}, format="json").json()
    assert api(lead).post("/api/v1/tokens/", {"user": "leo", "name": "mine"}, format="json").status_code == 404
    assert api(lead).post(f"/api/v1/tokens/{_made['id']}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=_made["id"]).revoked_at is None


def test_session_writes_need_the_csrf_token_like_the_pages(platform_admin, team, pool):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(platform_admin)
    response = client.patch("/api/v1/teams/alpha/", {"description": "x"}, format="json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]


def test_api_writes_are_audited_with_who_what_before_and_after(api, platform_admin, team, pool):
    quota = QuotaFactory(team=team, pool=pool, max_gpus=4)
    api(platform_admin).patch(f"/api/v1/quotas/{quota.pk}/", {"max_gpus": 6}, format="json")

    entries = api(platform_admin).get("/api/v1/audit/", {"object_type": "pools.quota"}).json()["results"]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["actor"] == "ada" and entry["action"] == "quota.set" and entry["object_id"] == str(quota.pk)
    assert entry["before"]["max_gpus"] == 4 and entry["after"]["max_gpus"] == 6
    assert entry["at"]


def test_token_creation_and_revocation_are_audited_without_the_secret(api, platform_admin, researcher):
    admin = api(platform_admin)
    made = admin.post("/api/v1/tokens/", {"user": "rita", "name": "ci"}, format="json").json()
    admin.post(f"/api/v1/tokens/{made['id']}/revoke/")
    actions = list(AuditEntry.objects.filter(object_type="portal.apitoken").values_list("action", flat=True))
    assert sorted(actions) == ["token.create", "token.revoke"]
    for entry in AuditEntry.objects.filter(object_type="portal.apitoken"):
        assert made["token"] not in str(entry.before) + str(entry.after)
        assert "key_hash" not in (entry.after or {})


def test_team_and_membership_writes_through_the_api_are_audited(api, platform_admin, team, outsider):
    admin = api(platform_admin)
    admin.patch("/api/v1/teams/alpha/", {"name": "Alpha Team"}, format="json")
    membership = admin.post(
        "/api/v1/memberships/", {"team": "alpha", "user": "otto", "role": "researcher"}, format="json"
    ).json()
    admin.patch(f"/api/v1/memberships/{membership['id']}/", {"role": "lead"}, format="json")
    admin.delete(f"/api/v1/memberships/{membership['id']}/")
    actions = [e["action"] for e in admin.get("/api/v1/audit/", {"ordering": "id"}).json()["results"]]
    assert actions == ["team.update", "membership.create", "membership.update", "membership.delete"]
    renamed = AuditEntry.objects.get(action="team.update")
    assert (renamed.before["name"], renamed.after["name"]) == ("Alpha", "Alpha Team")
    assert not Membership.objects.filter(user=outsider, team=team).exists()


@pytest.mark.django_db
def test_django_admin_writes_are_audited_and_the_log_is_read_only_there(client, platform_admin, team, pool):
    client.force_login(platform_admin)
    node = NodeFactory(name="gpu-x", pool=pool)

    response = client.post(
        f"/admin/portal/team/{team.pk}/change/",
        {
            "slug": "alpha",
            "name": "Alpha Renamed",
            "description": "",
            "queueing_strategy": "StrictFIFO",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    client.post(f"/admin/pools/node/{node.pk}/delete/", {"post": "yes"})

    renamed = AuditEntry.objects.get(action="team.update")
    assert renamed.actor == platform_admin
    assert (renamed.before["name"], renamed.after["name"]) == ("Alpha", "Alpha Renamed")
    deleted = AuditEntry.objects.get(action="node.delete")
    assert deleted.before["name"] == "gpu-x" and deleted.after is None and deleted.object_id == str(node.pk)

    assert client.get("/admin/portal/auditentry/").status_code == 200
    assert client.get(f"/admin/portal/auditentry/{renamed.pk}/change/").status_code == 200
    assert client.post(f"/admin/portal/auditentry/{renamed.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=renamed.pk).exists()


def test_user_passwords_never_reach_the_audit_log(client, platform_admin, researcher):
    Membership.objects.filter(user=researcher).delete()  # a user still in a team is not deleted in Django admin
    client.force_login(platform_admin)
    client.post(f"/admin/portal/user/{researcher.pk}/delete/", {"post": "yes"})
    entry = AuditEntry.objects.get(action="user.delete")
    assert entry.before["username"] == "rita" and entry.before["password"] == "(hidden)"


def test_the_token_lookup_reads_the_token_and_its_user_as_the_orm_does(api, platform_admin, researcher):
    from django.forms.models import model_to_dict

    from portal.authentication import token_with_user

    researcher.notify_default = ["start", "fail"]
    researcher.language = "zh-hans"
    researcher.save()
    response = api(platform_admin).post("/api/v1/tokens/", {"user": researcher.username, "name": "ci"}, format="json")
    secret = response.json()["token"]
    expected = ApiToken.objects.select_related("user").get(key_hash=hash_secret(secret))
    token = token_with_user(hash_secret(secret))
    assert token is not None and not token._state.adding and token.pk == expected.pk
    assert [getattr(token, f.attname) for f in ApiToken._meta.concrete_fields] == [
        getattr(expected, f.attname) for f in ApiToken._meta.concrete_fields
    ]
    assert model_to_dict(token.user) == model_to_dict(expected.user)
    assert token.user.notify_default == ["start", "fail"] and token.user.language == "zh-hans"
    assert token_with_user(hash_secret("rsv_not-a-token")) is None
