"""The OpenAPI 3 schema generates without warnings, validates, and documents every endpoint; Swagger UI serves."""

import yaml
from django.core.management import call_command
from drf_spectacular.validation import validate_schema


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
