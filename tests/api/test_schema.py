"""The OpenAPI 3 schema generates without warnings, validates, and documents every endpoint; Swagger UI serves."""

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.validation import validate_schema

from portal.choices import Role
from tests.factories import MembershipFactory, UserFactory


def test_schema_generates_validates_and_lists_the_api(api, researcher, tmp_path):
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    schema = yaml.safe_load(path.read_text())
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    for endpoint in (
        "/api/v1/teams/",
        "/api/v1/memberships/",
        "/api/v1/tokens/{id}/revoke/",
        "/api/v1/audit/",
        "/api/v1/pools/{slug}/occupancy/",
        "/api/v1/nodes/",
        "/api/v1/reservations/",
        "/api/v1/quotas/{id}/",
        "/api/v1/namespace-limits/{team}/",
        "/api/v1/jobs/",
        "/api/v1/jobs/{id}/cancel/",
        "/api/v1/usage/",
        "/api/v1/invoices/",
        "/api/v1/volumes/",
        "/api/v1/secrets/{id}/rotate/",
    ):
        assert endpoint in schema["paths"], endpoint
    assert "202" in schema["paths"]["/api/v1/jobs/{id}/cancel/"]["post"]["responses"]
    assert "201" in schema["paths"]["/api/v1/jobs/"]["post"]["responses"]
    assert schema["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"

    served = api(researcher).get("/api/schema/")
    assert served.status_code == 200
    assert api(researcher).get("/api/docs/").status_code == 200


@pytest.mark.usefixtures("compiled_translations")
@pytest.mark.parametrize(
    ("language", "pools", "month", "alerts"),
    [
        ("en", "GPU pools. Every signed-in user", "YYYY-MM (UTC); default: the current month", "Alerts the caller"),
        ("zh-hans", "GPU 资源池。每位已登录用户", "YYYY-MM（UTC）；默认：当月", "调用者可见的告警"),
    ],
)
def test_the_schema_describes_the_api_in_the_readers_language(client, team, language, pools, month, alerts):
    reader = MembershipFactory(team=team, role=Role.RESEARCHER, user=UserFactory(language=language)).user
    client.force_login(reader)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["paths"]["/api/v1/pools/"]["get"]["description"].startswith(pools)
    assert schema["paths"]["/api/v1/alerts/"]["get"]["description"].startswith(alerts)
    usage = schema["paths"]["/api/v1/usage/"]["get"]["parameters"]
    assert next(p for p in usage if p["name"] == "month")["description"] == month
    line = schema["components"]["schemas"]["InvoiceLine"]["properties"]
    assert line["description_localised"]["description"] == (
        "The description in the reader's language." if language == "en" else "以读者的语言显示的说明。"
    )
