"""Billing pages and API: what a lead, a researcher, an outsider and an admin each get."""

import csv
import io
import json
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import services
from billing.models import Invoice
from portal.choices import Role
from tests.billing.conftest import at
from tests.factories import MembershipFactory, UserFactory

NOW = at(16, 12)  # March 2026 is half over


@pytest.fixture
def metered(team, other_team, reservation, pod, elastic_pool):
    pod(at(2, 10), at(2, 12), gpus=6)  # 4 GPU-hours of overage
    pod(at(3, 0), at(3, 2), gpus=1, pool=elastic_pool)  # 2 GPU-hours of spill
    pod(at(3, 0), at(3, 5), gpus=2, for_team=other_team)
    with time_machine.travel(NOW, tick=False):
        services.refresh_usage(now=NOW)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def page(client, user, *args, **query):
    client.force_login(user)
    return client.get(reverse("billing:team_billing", args=args), query)


def test_lead_sees_the_month_with_units_chart_costs_and_exports(client, lead, metered, frozen):
    response = page(client, lead, "alpha", month="2026-03")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Billing of Alpha" in body
    # Half of March: 4 GPUs × 15.5 days × 24 h = 1488 GPU-hours reserved.
    assert "1488.00 GPU-h" in body  # R
    assert "4.00 GPU-h" in body  # overage
    assert "2.00 GPU-h" in body  # spill
    assert "<svg" in body and 'class="reserved"' in body
    assert "19,600.00" in body  # the reservation fee accrued to mid-month (money grouped by thousands)
    assert "72.00" in body and "13.00" in body  # overage 4 × 18, spill 2 × 6.50
    assert reverse("billing:team_usage_csv", args=["alpha", "2026-03"]) in body
    assert reverse("billing:team_usage_json", args=["alpha", "2026-03"]) in body


def test_month_picker_answers_htmx_with_the_fragment_only(client, lead, metered, frozen):
    client.force_login(lead)
    response = client.get(reverse("billing:team_billing", args=["alpha"]), {"month": "2026-03"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    assert 'class="billing-month"' in body


@pytest.mark.parametrize("who", ["researcher", "outsider"])
def test_billing_of_a_team_you_do_not_lead_is_404(client, request, metered, frozen, who):
    user = request.getfixturevalue(who)
    client.force_login(user)
    assert client.get(reverse("billing:team_billing", args=["alpha"])).status_code == 404
    assert client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"])).status_code == 404
    assert client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"])).status_code == 404
    assert client.get(reverse("billing:team_billing", args=["alpha"]), HTTP_HX_REQUEST="true").status_code == 404


def test_billing_home_sends_a_lead_to_their_team_and_a_researcher_nowhere(client, lead, researcher, frozen):
    client.force_login(lead)
    assert client.get(reverse("billing:home"))["Location"] == reverse("billing:team_billing", args=["alpha"])
    client.force_login(researcher)
    assert client.get(reverse("billing:home")).status_code == 404


def test_navigation_shows_billing_to_leads_only(client, lead, researcher, frozen):
    client.force_login(lead)
    assert reverse("billing:home").encode() in client.get(reverse("portal:home")).content
    client.force_login(researcher)
    assert reverse("billing:home").encode() not in client.get(reverse("portal:home")).content


def test_json_export_has_the_figures_and_cost_lines(client, lead, metered, frozen):
    client.force_login(lead)
    response = client.get(reverse("billing:team_usage_json", args=["alpha", "2026-03"]))
    data = json.loads(response.content)
    assert data["team"] == "alpha" and data["month"] == "2026-03" and data["status"] == "draft"
    assert Decimal(data["totals"]["reserved_gpu_hours"]) == Decimal(1488)
    assert Decimal(data["totals"]["overage_gpu_hours"]) == Decimal(4)
    assert Decimal(data["totals"]["spill_gpu_hours"]) == Decimal(2)
    assert Decimal(data["total"]) == Decimal("19600.00") + Decimal("72.00") + Decimal("13.00")
    assert len(data["daily"]) == 31
    assert Decimal(data["daily"][1]["overage_gpu_hours"]) == Decimal(4)


def test_csv_export_has_a_row_per_day_and_the_cost_lines(client, lead, metered, frozen):
    client.force_login(lead)
    response = client.get(reverse("billing:team_usage_csv", args=["alpha", "2026-03"]))
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["team", "month", "day"]
    assert rows[2][2] == "2026-03-02" and Decimal(rows[2][5]) == Decimal(4)  # overage on March 2nd
    assert ["total", "", "", "", "", "19685.00", "", "", ""] in rows


def test_closed_invoices_are_listed_and_open_to_their_lead(client, lead, team, reservation):
    services.close_month(month=at(1).date(), now=at(2, month=4))
    with time_machine.travel(at(3, month=4), tick=False):
        client.force_login(lead)
        body = client.get(reverse("billing:team_billing", args=["alpha"])).content.decode()
        assert "March 2026" in body
        detail = client.get(reverse("billing:invoice_detail", args=["alpha", "2026-03"]))
    assert detail.status_code == 200
    assert b"39,200.00" in detail.content


def test_a_lead_of_two_teams_switches_between_them_only(client, team, other_team, frozen):
    both = UserFactory(username="bea")
    MembershipFactory(user=both, team=team, role=Role.LEAD)
    MembershipFactory(user=both, team=other_team, role=Role.RESEARCHER)
    response = page(client, both, "alpha")
    assert response.status_code == 200
    assert reverse("billing:team_billing", args=["beta"]).encode() not in response.content
    assert page(client, both, "beta").status_code == 404


def test_admin_pool_view_shows_contracted_against_used(client, platform_admin, metered, frozen):
    client.force_login(platform_admin)
    response = client.get(reverse("billing:pool_usage"), {"month": "2026-03"})
    assert response.status_code == 200
    body = response.content.decode()
    # 16 contracted GPUs × 372 hours so far = 5952 GPU-hours; used 2×6 + 5×2 (beta) = 22 GPU-hours.
    assert "5952.00 GPU-h" in body
    assert "22.00 GPU-h" in body
    assert "0.4 %" in body  # 22 / 5952 = 0.37 %
    assert "Alpha" in body and "Beta" in body


def test_pool_view_is_404_for_a_lead(client, lead, frozen):
    client.force_login(lead)
    assert client.get(reverse("billing:pool_usage")).status_code == 404


# --- API ---------------------------------------------------------------------------------------------------------


def test_api_usage_lists_led_teams_only(client, lead, metered, frozen):
    client.force_login(lead)
    rows = client.get("/api/v1/usage/", {"month": "2026-03"}).json()
    assert {row["team"] for row in rows} == {"alpha"}
    a800 = next(row for row in rows if row["pool"] == "a800")
    assert Decimal(a800["overage_gpu_hours"]) == 4
    assert Decimal(a800["reserved_gpu_hours"]) == 1488


def test_api_usage_of_another_team_is_404(client, lead, researcher, metered, frozen):
    client.force_login(lead)
    assert client.get("/api/v1/usage/alpha/", {"month": "2026-03"}).status_code == 200
    assert client.get("/api/v1/usage/beta/", {"month": "2026-03"}).status_code == 404
    client.force_login(researcher)
    assert client.get("/api/v1/usage/alpha/", {"month": "2026-03"}).status_code == 404


def test_api_invoices_are_scoped_and_carry_lines(client, lead, outsider, metered, frozen):
    client.force_login(lead)
    listed = client.get("/api/v1/invoices/").json()["results"]
    assert [(row["team"], row["month"], row["status"]) for row in listed] == [("alpha", "2026-03", "draft")]
    assert {line["kind"] for line in listed[0]["lines"]} == {"reservation_fee", "overage", "spill"}
    beta = Invoice.objects.get(team__slug="beta")
    assert client.get(f"/api/v1/invoices/{beta.pk}/").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/api/v1/invoices/{beta.pk}/").status_code == 200


def test_api_needs_login(client, db):
    assert client.get("/api/v1/invoices/").status_code in (401, 403)


def test_openapi_schema_describes_the_billing_api_without_warnings(db):
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    assert {"/api/v1/usage/", "/api/v1/usage/{slug}/", "/api/v1/invoices/", "/api/v1/invoices/{id}/"} <= set(
        schema["paths"]
    )
