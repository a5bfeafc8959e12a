"""Quota requests: a team lead asks for a quota change with a reason, a platform admin approves (the quota changes,
through set_quota, audited) or rejects it, the lead may withdraw it. One pending request per team and pool."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from jobs.choices import JobState
from pools import services
from pools.choices import QuotaRequestState
from pools.models import Quota, QuotaRequest
from portal.choices import Role
from portal.models import AuditEntry
from tests.factories import JobFactory, MembershipFactory, PoolFactory, QuotaFactory, ReservationFactory, UserFactory


@pytest.fixture
def pool(db):
    return PoolFactory(slug="train", name="Training")


@pytest.fixture
def quota(team, pool):
    return QuotaFactory(team=team, pool=pool, max_gpus=8)


def ask(team, pool, user, max_gpus=12, reason="Two more fine-tuning runs this month."):
    return services.request_quota_change(team=team, pool=pool, max_gpus=max_gpus, reason=reason, user=user)


def messages_of(error: ValidationError) -> str:
    return " ".join(error.value.messages)


def test_a_lead_requests_a_change_which_is_pending_and_audited(lead, team, pool, quota):
    request = ask(team, pool, lead)
    assert request.state == QuotaRequestState.PENDING
    assert (request.previous_max_gpus, request.max_gpus, request.requested_by) == (8, 12, lead)
    entry = AuditEntry.objects.get(action="quota_request.create")
    assert entry.actor == lead and entry.after["max_gpus"] == 12
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8  # nothing changes before an admin decides


def test_an_admin_may_request_too_and_a_pool_without_quota_starts_from_zero(platform_admin, team, pool):
    request = ask(team, pool, platform_admin, max_gpus=4)
    assert request.previous_max_gpus == 0


@pytest.mark.parametrize("who", ["researcher", "outsider"])
def test_only_leads_of_the_team_may_request(request, team, pool, quota, who):
    with pytest.raises(ValidationError) as error:
        ask(team, pool, request.getfixturevalue(who))
    assert "Only a lead of Alpha" in messages_of(error)
    assert not QuotaRequest.objects.exists()


def test_a_request_must_change_something_and_say_why(lead, team, pool, quota):
    with pytest.raises(ValidationError) as error:
        ask(team, pool, lead, max_gpus=8)
    assert error.value.message_dict["max_gpus"] == ["Alpha's quota in Training is already 8 GPUs."]
    with pytest.raises(ValidationError) as error:
        ask(team, pool, lead, reason="   ")
    assert "Say why" in error.value.message_dict["reason"][0]
    with pytest.raises(ValidationError) as error:
        ask(team, pool, lead, max_gpus=-1)
    assert "max_gpus" in error.value.message_dict


def test_one_pending_request_per_team_and_pool(lead, team, other_team, pool, quota, platform_admin):
    ask(team, pool, lead)
    with pytest.raises(ValidationError) as error:
        ask(team, pool, lead, max_gpus=16)
    assert "already pending" in error.value.message_dict["pool"][0]
    # Another pool, or another team, is a separate request.
    ask(team, PoolFactory(slug="infer", name="Inference"), lead, max_gpus=2)
    ask(other_team, pool, platform_admin, max_gpus=2)
    assert QuotaRequest.objects.pending().count() == 3


def test_the_database_refuses_a_second_pending_request(lead, team, pool, quota):
    first = ask(team, pool, lead)
    with pytest.raises(IntegrityError):
        QuotaRequest.objects.create(team=team, pool=pool, max_gpus=3, reason="x", requested_by=lead)
    assert first.pk


def test_after_a_decision_the_lead_may_ask_again(lead, team, pool, quota, platform_admin):
    services.reject_quota_request(request=ask(team, pool, lead), user=platform_admin, note="Not this month.")
    assert ask(team, pool, lead, max_gpus=10).state == QuotaRequestState.PENDING


def test_approval_sets_the_quota_and_records_both_changes(lead, team, pool, quota, platform_admin):
    request = ask(team, pool, lead)
    approved = services.approve_quota_request(request=request, user=platform_admin, note="OK for March.")
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 12
    approved.refresh_from_db()
    assert approved.state == QuotaRequestState.APPROVED
    assert approved.decided_by == platform_admin and approved.decided_at is not None
    assert approved.decision_note == "OK for March."
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["quota_request.create", "quota.set", "quota_request.approve"]
    quota_entry = AuditEntry.objects.get(action="quota.set")
    assert (quota_entry.before["max_gpus"], quota_entry.after["max_gpus"], quota_entry.actor) == (8, 12, platform_admin)


def test_approval_creates_a_quota_the_team_did_not_have(lead, team, pool, platform_admin):
    services.approve_quota_request(request=ask(team, pool, lead, max_gpus=4), user=platform_admin)
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 4


def test_approval_below_running_jobs_fails_and_the_request_stays_pending(
    lead, researcher, team, pool, quota, platform_admin
):
    JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=6, state=JobState.RUNNING, name="big-run")
    request = ask(team, pool, lead, max_gpus=2)
    with pytest.raises(ValidationError) as error:
        services.approve_quota_request(request=request, user=platform_admin)
    assert "use 6 GPUs of Training now" in messages_of(error) and "big-run" in messages_of(error)
    request.refresh_from_db()
    assert request.state == QuotaRequestState.PENDING and request.decided_at is None
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8
    assert not AuditEntry.objects.filter(action__in=["quota.set", "quota_request.approve"]).exists()


def test_approval_below_the_reservation_fails(lead, team, pool, quota, platform_admin):
    ReservationFactory(team=team, pool=pool, gpus=4)
    request = ask(team, pool, lead, max_gpus=3)
    with pytest.raises(ValidationError) as error:
        services.approve_quota_request(request=request, user=platform_admin)
    assert "reserves up to 4 GPUs" in messages_of(error)
    request.refresh_from_db()
    assert request.is_pending


@pytest.mark.parametrize("decide", [services.approve_quota_request, services.reject_quota_request])
def test_only_admins_decide(lead, researcher, team, pool, quota, decide):
    request = ask(team, pool, lead)
    for user in (lead, researcher):
        with pytest.raises(ValidationError) as error:
            decide(request=request, user=user)
        assert "Only a platform admin" in messages_of(error)
    request.refresh_from_db()
    assert request.is_pending and Quota.objects.get(team=team, pool=pool).max_gpus == 8


def test_reject_keeps_the_quota_and_tells_why(lead, team, pool, quota, platform_admin):
    request = services.reject_quota_request(request=ask(team, pool, lead), user=platform_admin, note="  Budget.  ")
    request.refresh_from_db()
    assert (request.state, request.decision_note, request.decided_by) == ("rejected", "Budget.", platform_admin)
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8
    assert AuditEntry.objects.filter(action="quota_request.reject", actor=platform_admin).exists()


def test_a_decided_request_cannot_be_decided_again(lead, team, pool, quota, platform_admin):
    request = ask(team, pool, lead)
    services.reject_quota_request(request=request, user=platform_admin)
    for change in (
        lambda: services.approve_quota_request(request=request, user=platform_admin),
        lambda: services.reject_quota_request(request=request, user=platform_admin),
        lambda: services.withdraw_quota_request(request=request, user=lead),
    ):
        with pytest.raises(ValidationError) as error:
            change()
        assert "already rejected" in messages_of(error)
    assert Quota.objects.get(team=team, pool=pool).max_gpus == 8


def test_the_requesting_lead_withdraws(lead, team, pool, quota, platform_admin):
    other_lead = MembershipFactory(team=team, role=Role.LEAD, user=UserFactory(username="lena")).user
    request = ask(team, pool, lead)
    for user in (other_lead, platform_admin):
        with pytest.raises(ValidationError) as error:
            services.withdraw_quota_request(request=request, user=user)
        assert "Only the lead who made a request" in messages_of(error)
    services.withdraw_quota_request(request=request, user=lead)
    request.refresh_from_db()
    assert request.state == QuotaRequestState.WITHDRAWN and request.decided_by == lead
    assert AuditEntry.objects.filter(action="quota_request.withdraw", actor=lead).exists()
    # Withdrawn, so the lead can ask for something else at once.
    assert ask(team, pool, lead, max_gpus=9).is_pending


def test_visibility_leads_see_their_teams_admins_all_researchers_none(
    lead, researcher, outsider, team, other_team, pool, platform_admin
):
    mine = ask(team, pool, lead, max_gpus=3)
    theirs = ask(other_team, pool, outsider, max_gpus=3)
    assert list(QuotaRequest.objects.visible_to(lead)) == [mine]
    assert list(QuotaRequest.objects.visible_to(outsider)) == [theirs]
    assert not QuotaRequest.objects.visible_to(researcher).exists()
    assert set(QuotaRequest.objects.visible_to(platform_admin)) == {mine, theirs}
