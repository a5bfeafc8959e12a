"""Team pages for leads (usage against quota and reservation, members, link to billing) and the per-user
language: the role matrix, Chinese for users who chose it, the switcher."""

import pytest
from django.urls import reverse

from jobs.choices import JobState
from portal.choices import Role
from portal.models import User
from tests.factories import (
    JobFactory,
    MembershipFactory,
    PodFactory,
    PoolFactory,
    QuotaFactory,
    ReservationFactory,
    UserFactory,
)

pytestmark = pytest.mark.usefixtures("compiled_translations")


@pytest.mark.parametrize(
    ("who", "status"), [("lead", 200), ("platform_admin", 200), ("researcher", 404), ("outsider", 404)]
)
def test_team_page_is_for_its_leads_and_admins(client, request, team, who, status):
    client.force_login(request.getfixturevalue(who))
    assert client.get(reverse("portal:team_detail", args=[team.slug])).status_code == status


def test_team_list_takes_a_lead_of_one_team_straight_to_it_and_is_404_for_researchers(client, lead, researcher, team):
    client.force_login(lead)
    response = client.get(reverse("portal:team_list"))
    assert response.status_code == 302 and response["Location"] == reverse("portal:team_detail", args=["alpha"])
    client.force_login(researcher)
    assert client.get(reverse("portal:team_list")).status_code == 404


def test_team_page_shows_usage_against_quota_and_reservation_members_and_billing(client, lead, researcher, team):
    pool = PoolFactory(slug="train", name="Train Pool")
    QuotaFactory(team=team, pool=pool, max_gpus=8)
    ReservationFactory(team=team, pool=pool, gpus=4)
    JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=6, state=JobState.RUNNING)
    JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=3, state=JobState.QUEUED)
    JobFactory(team=team, pool=pool, submitted_by=researcher, gpus=5, state=JobState.SUCCEEDED)
    client.force_login(lead)
    html = client.get(reverse("portal:team_detail", args=["alpha"])).content.decode()
    assert "6 of 8 GPUs of the quota" in html
    assert '<td class="num">3 GPUs</td>' in html  # queued
    assert '<td class="num">4 GPUs</td>' in html  # reserved now
    assert "rita" in html and "leo" in html and "Team lead" in html
    assert reverse("billing:team_billing", args=["alpha"]) in html


def test_team_navigation_only_for_leads(client, lead, researcher):
    client.force_login(researcher)
    assert reverse("portal:team_list").encode() not in client.get(reverse("portal:home")).content
    client.force_login(lead)
    assert reverse("portal:team_list").encode() in client.get(reverse("portal:home")).content


def test_a_user_who_chose_chinese_gets_chinese_pages(client, team):
    user = UserFactory(username="wang", language="zh-hans")
    MembershipFactory(team=team, user=user, role=Role.RESEARCHER)
    client.force_login(user)
    html = client.get(reverse("jobs:job_list"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="zh-hans">' in html
    assert "提交作业" in html and "作业" in html


def test_login_applies_the_users_language(client, team):
    user = UserFactory(username="li", language="zh-hans")
    MembershipFactory(team=team, user=user)
    response = client.post(reverse("portal:login"), {"username": "li", "password": "pw-for-tests"}, follow=True)
    assert "你的团队" in response.content.decode()


def test_the_switcher_stores_the_language_on_the_user(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("portal:set_language"), {"language": "zh-hans", "next": "/pools/"})
    assert response.status_code == 302 and response["Location"] == "/pools/"
    assert User.objects.get(pk=researcher.pk).language == "zh-hans"
    assert "资源池" in client.get(reverse("pools:pool_list")).content.decode()
    client.post(reverse("portal:set_language"), {"language": "en", "next": "/pools/"})
    assert "Pending work" not in client.get(reverse("pools:pool_list")).content.decode()
    assert "No pools yet" in client.get(reverse("pools:pool_list")).content.decode()
    assert User.objects.get(pk=researcher.pk).language == "en"


def test_the_switcher_refuses_unknown_languages_and_foreign_redirects(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("portal:set_language"), {"language": "xx", "next": "https://evil.example/"})
    assert response["Location"] == "/"
    assert User.objects.get(pk=researcher.pk).language == "en"
    for elsewhere in ("//evil.example/", "abc", "-1", "javascript:alert(1)"):
        response = client.post(reverse("portal:set_language"), {"language": "en", "next": elsewhere})
        assert (response.status_code, response["Location"]) == (302, "/"), elsewhere


def test_chinese_pending_reasons_and_units(client, team):
    user = UserFactory(username="zhao", language="zh-hans")
    MembershipFactory(team=team, user=user)
    pool = PoolFactory(slug="train", name="Train Pool")
    PodFactory(
        name="rsv-z",
        team=team,
        pool=pool,
        gpus=8,
        pending_reason="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    )
    client.force_login(user)
    html = client.get(reverse("jobs:pending")).content.decode()
    assert "2 个节点空闲 GPU 不足" in html
