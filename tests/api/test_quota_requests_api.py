"""/api/v1/quota-requests/: leads ask for their teams, admins approve (the quota changes at once) or reject, the
requesting lead withdraws; scope answers 404 and role 403, like the rest of the API."""

import pytest
import yaml
from django.core.management import call_command

from pools import services
from pools.models import Quota, QuotaRequest
from portal.models import AuditEntry
from tests.factories import JobFactory, PoolFactory

URL = "/api/v1/quota-requests/"
BODY = {"team": "alpha", "pool": "train", "max_gpus": 12, "reason": "Fine-tuning sprint"}


@pytest.fixture
def world(world, platform_admin):
    world["admin"] = platform_admin
    return world


def ask(team, pool, user, max_gpus=12):
    return services.request_quota_change(team=team, pool=pool, max_gpus=max_gpus, reason="why", user=user)


def test_a_lead_asks_and_a_second_pending_request_is_refused(api, world, lead):
    response = api(lead).post(URL, BODY, format="json")
    assert response.status_code == 201
    body = response.json()
    assert (body["team"], body["pool"], body["previous_max_gpus"], body["max_gpus"]) == ("alpha", "train", 8, 12)
    assert (body["state"], body["requested_by"], body["decided_at"]) == ("pending", "leo", None)
    again = api(lead).post(URL, {**BODY, "max_gpus": 16}, format="json")
    assert again.status_code == 400 and "already pending" in again.json()["pool"][0]


def test_create_errors_name_their_fields(api, world, lead, researcher, outsider):
    assert api(lead).post(URL, {**BODY, "max_gpus": 8}, format="json").json() == {
        "max_gpus": ["Alpha's quota in Training is already 8 GPUs."]
    }
    assert "reason" in api(lead).post(URL, {**BODY, "reason": ""}, format="json").json()
    assert "max_gpus" in api(lead).post(URL, {**BODY, "max_gpus": -2}, format="json").json()
    # A team the caller cannot see is unknown; one they see but do not lead is forbidden.
    assert api(outsider).post(URL, BODY, format="json").json() == {"team": ["Unknown team 'alpha'."]}
    assert api(researcher).post(URL, BODY, format="json").status_code == 403
    assert not QuotaRequest.objects.exists()


def test_list_is_scoped_leads_see_their_teams_admins_all(
    api, world, team, other_team, pool, lead, outsider, researcher
):
    mine, theirs = ask(team, pool, lead), ask(other_team, pool, outsider)
    ids = lambda user, query="": [row["id"] for row in api(user).get(URL + query).json()["results"]]  # noqa: E731
    assert ids(lead) == [mine.pk]
    assert ids(outsider) == [theirs.pk]
    assert ids(researcher) == []
    assert set(ids(world["admin"])) == {mine.pk, theirs.pk}
    assert ids(world["admin"], "?team=beta&state=pending") == [theirs.pk]
    assert api(outsider).get(f"{URL}{mine.pk}/").status_code == 404


def test_approve_sets_the_quota_and_is_audited(api, world, team, pool, lead, platform_admin):
    quota_request = ask(team, pool, lead)
    response = api(platform_admin).post(f"{URL}{quota_request.pk}/approve/", {"note": "For March"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["decided_by"], body["decision_note"]) == ("approved", "ada", "For March")
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 12
    assert api(lead).get(f"/api/v1/quotas/{world['quotas']['alpha'].pk}/").json()["max_gpus"] == 12
    assert set(AuditEntry.objects.filter(actor=platform_admin).values_list("action", flat=True)) >= {
        "quota.set",
        "quota_request.approve",
    }
    again = api(platform_admin).post(f"{URL}{quota_request.pk}/reject/", {}, format="json")
    assert again.status_code == 400 and "already approved" in again.json()["non_field_errors"][0]


def test_approve_below_the_reservation_answers_400_and_the_request_stays_pending(api, world, team, pool, lead):
    quota_request = ask(team, pool, lead, max_gpus=1)  # alpha reserves 4 GPUs of train
    response = api(world["admin"]).post(f"{URL}{quota_request.pk}/approve/", {}, format="json")
    assert response.status_code == 400
    assert "reserves up to 4 GPUs of Training" in response.json()["non_field_errors"][0]
    quota_request.refresh_from_db()
    assert quota_request.is_pending and Quota.objects.get(team=team, pool=pool).max_gpus == 8


def test_approve_below_running_jobs_answers_400_naming_them(api, world, team, lead, researcher):
    infer = PoolFactory(slug="infer", name="Inference")
    Quota.objects.create(team=team, pool=infer, max_gpus=8)
    JobFactory(team=team, pool=infer, submitted_by=researcher, state="running", gpus=6, name="serve-big")
    quota_request = ask(team, infer, lead, max_gpus=2)
    response = api(world["admin"]).post(f"{URL}{quota_request.pk}/approve/", {}, format="json")
    assert response.status_code == 400 and "serve-big" in response.json()["non_field_errors"][0]
    assert QuotaRequest.objects.get(pk=quota_request.pk).is_pending


def test_reject_and_withdraw(api, world, team, pool, lead, platform_admin):
    infer = PoolFactory(slug="infer", name="Inference")
    rejected = ask(team, pool, lead)
    withdrawn = ask(team, infer, lead, max_gpus=2)
    response = api(platform_admin).post(f"{URL}{rejected.pk}/reject/", {"note": "Budget"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "rejected"
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8
    assert api(platform_admin).post(f"{URL}{withdrawn.pk}/withdraw/").status_code == 403
    response = api(lead).post(f"{URL}{withdrawn.pk}/withdraw/")
    assert response.status_code == 200 and response.json()["state"] == "withdrawn"


def test_outside_scope_every_action_is_404(api, world, other_team, pool, outsider, lead):
    theirs = ask(other_team, pool, outsider)
    for action in ("approve/", "reject/", "withdraw/", ""):
        method = api(lead).get if not action else api(lead).post
        assert method(f"{URL}{theirs.pk}/{action}").status_code == 404
    assert QuotaRequest.objects.get(pk=theirs.pk).is_pending


def test_schema_documents_the_endpoints(tmp_path, db):
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    paths = yaml.safe_load(path.read_text())["paths"]
    assert "201" in paths["/api/v1/quota-requests/"]["post"]["responses"]
    for action in ("approve", "reject", "withdraw"):
        assert "200" in paths[f"/api/v1/quota-requests/{{id}}/{action}/"]["post"]["responses"]
