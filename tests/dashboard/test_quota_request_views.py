"""Quota requests on the team page (a lead asks, sees pending requests and past decisions, withdraws) and in Django
admin (admins approve or reject from the list, through the services)."""

import pytest
from django.urls import reverse

from jobs.choices import JobState
from pools import services
from pools.models import Quota, QuotaRequest
from tests.factories import JobFactory, PoolFactory, QuotaFactory


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training")


@pytest.fixture
def quota(team, pool):
    return QuotaFactory(team=team, pool=pool, max_gpus=8)


def page(client, slug="alpha"):
    return client.get(reverse("portal:team_detail", args=[slug]))


def post_request(client, data, slug="alpha"):
    return client.post(reverse("portal:team_quota_request", args=[slug]), data)


def ask(team, pool, user, max_gpus=12, reason="Fine-tuning sprint."):
    return services.request_quota_change(team=team, pool=pool, max_gpus=max_gpus, reason=reason, user=user)


def test_a_lead_sends_a_request_from_the_team_page_and_sees_it_pending(client, lead, team, pool, quota):
    client.force_login(lead)
    html = page(client).content.decode()
    assert "Request a quota change" in html and "Training (quota now 8 GPUs)" in html
    response = post_request(client, {"pool": "train", "max_gpus": "12", "reason": "Fine-tuning sprint."})
    assert response.status_code == 302 and response["Location"] == reverse("portal:team_detail", args=["alpha"])
    html = client.get(response["Location"]).content.decode()
    assert "Your request for 12 GPUs of Training was sent to the platform admins." in html
    assert "Waiting for a platform admin" in html and "Fine-tuning sprint." in html and "Withdraw" in html
    assert QuotaRequest.objects.get().max_gpus == 12


def test_errors_come_back_beside_the_fields_with_what_was_typed(client, lead, team, pool, quota):
    client.force_login(lead)
    response = post_request(client, {"pool": "train", "max_gpus": "8", "reason": "Keep my words here"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Alpha&#x27;s quota in Training is already 8 GPUs." in html
    assert "Keep my words here</textarea>" in html and 'value="8"' in html
    assert '<option value="train" selected>' in html
    response = post_request(client, {"pool": "train", "max_gpus": "12", "reason": ""})
    assert response.status_code == 400 and "Say why the team needs this change" in response.content.decode()
    assert not QuotaRequest.objects.exists()


def test_a_second_request_for_the_same_pool_is_refused_beside_the_pool(client, lead, team, pool, quota):
    ask(team, pool, lead)
    client.force_login(lead)
    response = post_request(client, {"pool": "train", "max_gpus": "16", "reason": "More"})
    assert response.status_code == 400
    assert "is already pending" in response.content.decode()
    assert QuotaRequest.objects.count() == 1


@pytest.mark.parametrize("who", ["researcher", "outsider"])
def test_researchers_and_outsiders_never_see_or_use_the_form(client, request, team, pool, quota, who):
    client.force_login(request.getfixturevalue(who))
    assert page(client).status_code == 404
    response = post_request(client, {"pool": "train", "max_gpus": "12", "reason": "x"})
    assert response.status_code == 404
    assert not QuotaRequest.objects.exists()


def test_past_decisions_are_listed_with_the_admins_note(client, lead, team, pool, quota, platform_admin):
    services.reject_quota_request(request=ask(team, pool, lead), user=platform_admin, note="Budget is spent.")
    services.approve_quota_request(request=ask(team, pool, lead, max_gpus=10), user=platform_admin)
    client.force_login(lead)
    html = page(client).content.decode()
    assert "Past requests" in html and "Budget is spent." in html
    assert "Rejected" in html and "Approved" in html
    assert "Training (quota now 10 GPUs)" in html


def test_the_lead_withdraws_a_pending_request(client, lead, team, pool, quota):
    quota_request = ask(team, pool, lead)
    client.force_login(lead)
    response = client.post(reverse("portal:team_quota_request_withdraw", args=["alpha", quota_request.pk]))
    assert response.status_code == 302
    html = client.get(response["Location"]).content.decode()
    assert "Request for Training withdrawn." in html and "Withdrawn" in html
    quota_request.refresh_from_db()
    assert quota_request.state == "withdrawn"


def test_withdraw_outside_scope_is_404(client, lead, outsider, team, other_team, pool, quota):
    quota_request = ask(team, pool, lead)
    client.force_login(outsider)
    assert client.post(reverse("portal:team_quota_request_withdraw", args=["alpha", quota_request.pk])).status_code == (
        404
    )
    # Through the outsider's own team's URL the request does not exist either.
    assert client.post(reverse("portal:team_quota_request_withdraw", args=["beta", quota_request.pk])).status_code == (
        404
    )
    quota_request.refresh_from_db()
    assert quota_request.is_pending


def test_admins_see_the_pending_count_and_a_link_to_review(client, lead, team, other_team, pool, platform_admin):
    ask(team, pool, lead)
    ask(other_team, pool, platform_admin, max_gpus=2)
    client.force_login(platform_admin)
    html = page(client).content.decode()
    assert "2 quota requests are waiting for a decision across all teams." in html
    assert reverse("admin:pools_quotarequest_changelist") + "?state__exact=pending" in html
    assert "Request a quota change" not in html  # an admin sets quotas directly
    html = client.get(reverse("portal:team_list")).content.decode()
    assert "2 quota requests are waiting for a decision." in html and "1 quota request pending" in html
    client.force_login(lead)
    assert "waiting for a decision across all teams" not in page(client).content.decode()


def test_admin_approves_and_rejects_from_the_list(client, lead, researcher, team, pool, quota, platform_admin):
    infer = PoolFactory(slug="infer", name="Inference")
    to_approve = ask(team, pool, lead)
    to_reject = ask(team, infer, lead, max_gpus=2)
    client.force_login(platform_admin)
    url = reverse("admin:pools_quotarequest_changelist")
    assert "Training" in client.get(url).content.decode()
    client.post(url, {"action": "approve", "_selected_action": [to_approve.pk]})
    client.post(url, {"action": "reject", "_selected_action": [to_reject.pk]})
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 12
    assert not Quota.objects.filter(team=team, pool=infer).exists()
    to_approve.refresh_from_db()
    to_reject.refresh_from_db()
    assert (to_approve.state, to_approve.decided_by, to_reject.state) == ("approved", platform_admin, "rejected")


def test_admin_approval_refused_by_running_jobs_says_why_and_stays_pending(
    client, lead, researcher, team, pool, quota, platform_admin
):
    JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=6, state=JobState.RUNNING, name="big-run")
    quota_request = ask(team, pool, lead, max_gpus=2)
    client.force_login(platform_admin)
    url = reverse("admin:pools_quotarequest_changelist")
    response = client.post(url, {"action": "approve", "_selected_action": [quota_request.pk]}, follow=True)
    assert "big-run" in response.content.decode()
    quota_request.refresh_from_db()
    assert quota_request.is_pending and Quota.objects.get(team=team, pool=pool).max_gpus == 8
