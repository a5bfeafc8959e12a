"""Months outside the range a date can name answer 404, never 500 (issue 15): in the usage API, the exports and
the invoice pages; the first and the last valid month still answer."""

import pytest
from django.urls import reverse

OUTSIDE = ["0000-01", "0001-01", "1969-12", "9999-12", "9999-01"]
EDGES = ["1970-01", "9998-12"]


def urls(month: str) -> list[str]:
    return [
        f"/api/v1/usage/?month={month}",
        f"/api/v1/usage/alpha/?month={month}",
        reverse("billing:team_usage_csv", args=["alpha", month]),
        reverse("billing:team_usage_json", args=["alpha", month]),
        reverse("billing:invoice_detail", args=["alpha", month]),
    ]


@pytest.mark.parametrize("month", OUTSIDE)
def test_months_outside_the_valid_range_answer_404(client, lead, month):
    client.force_login(lead)
    for url in urls(month):
        assert client.get(url).status_code == 404, url


@pytest.mark.parametrize("month", EDGES)
def test_the_first_and_last_valid_months_answer(client, lead, month):
    client.force_login(lead)
    api_usage, team_usage, csv_export, json_export, invoice = urls(month)
    for url in (api_usage, team_usage, csv_export, json_export):
        assert client.get(url).status_code == 200, url
    assert client.get(invoice).status_code == 404  # no invoice that month: absent, not broken
    assert client.get(reverse("billing:team_billing", args=["alpha"]), {"month": month}).status_code == 200
