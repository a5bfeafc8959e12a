"""Every field the API answers as null is nullable in the OpenAPI schema. A typed client generated from
`/api/schema/` (openapi-generator, openapi-python-client, ...) refuses an answer whose non-nullable string is null,
and ordinary answers had such nulls: a queued job's `admitted_pool` (its own help text says "null while queued"), a
system transition's `actor` in a job's events, an unrevoked token's `revoked_by`, a reservation without a creator, an
alert of no team or job, the `updated_at` of a team still on the default namespace limits. The related fields the
serializers declare themselves did not say `allow_null`, so the schema called them `type: string` alone.

One test reads real answers and checks each null in them against the schema the portal serves; the other holds every
field of the API's serializers whose model column is nullable to allowing null, for the answers the first one does
not read (volumes, secrets, quota requests, invoice lines, nodes)."""

import importlib
from datetime import timedelta

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework import serializers

from dashboard.api.urls import router
from jobs.models import JobEvent
from monitoring.models import Alert
from portal import services as portal_services
from teamdata.models import TeamVolume
from tests.factories import JobFactory


@pytest.fixture
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def _component(schema, node):
    """The schema object `node` stands for (following $ref and a single allOf)."""
    while True:
        if "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        elif "allOf" in node and len(node["allOf"]) == 1 and "nullable" not in node:
            node = node["allOf"][0]
        else:
            return node


def _nulls_not_allowed(schema, node, value, where="") -> list[str]:
    """Paths in `value` that are null where `node` (an OpenAPI 3.0 schema) does not allow null."""
    if node.get("nullable"):
        return []
    target = _component(schema, node)
    if value is None:
        return [] if target.get("nullable") else [where or "(root)"]
    found = []
    if isinstance(value, dict):
        for name, item in value.items():
            prop = (target.get("properties") or {}).get(name)
            if prop is not None:
                found += _nulls_not_allowed(schema, prop, item, f"{where}.{name}")
    elif isinstance(value, list) and "items" in target:
        for item in value:
            found += _nulls_not_allowed(schema, target["items"], item, f"{where}[]")
    return sorted(set(found))


def _response_schema(schema, path, method, status="200"):
    return schema["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]


def test_every_null_the_api_answers_is_nullable_in_its_schema(
    api, schema, world, platform_admin, team, pool, researcher
):
    queued = JobFactory(team=team, pool=pool, submitted_by=researcher, state="queued", name="waits")
    JobEvent.objects.create(job=queued, at=timezone.now(), from_state="", to_state="queued", actor=None)
    portal_services.create_token(owner=researcher, name="ci", user=platform_admin)
    Alert.objects.create(
        kind="queue_wait",
        subject_key="pool:train",
        subject="train",
        pool=pool,
        state="firing",
        severity="warning",
        value=45.0,
        peak_value=45.0,
        threshold=30,
        active_since=timezone.now() - timedelta(hours=1),
        fired_at=timezone.now(),
        last_evaluated_at=timezone.now(),
    )
    client = api(platform_admin)
    answers = {
        ("/api/v1/jobs/", "get"): client.get("/api/v1/jobs/?state=queued"),
        ("/api/v1/jobs/{id}/", "get"): client.get(f"/api/v1/jobs/{queued.pk}/"),
        ("/api/v1/tokens/", "get"): client.get("/api/v1/tokens/"),
        ("/api/v1/reservations/", "get"): client.get("/api/v1/reservations/"),
        ("/api/v1/namespace-limits/", "get"): client.get("/api/v1/namespace-limits/"),
        ("/api/v1/alerts/", "get"): client.get("/api/v1/alerts/"),
    }
    wrong = {}
    for (path, method), response in answers.items():
        assert response.status_code == 200, (path, response.content)
        nulls = _nulls_not_allowed(schema, _response_schema(schema, path, method), response.json())
        if nulls:
            wrong[path] = nulls
    assert wrong == {}, f"null in the answer, not nullable in the OpenAPI schema: {wrong}"


def _api_serializers():
    """The serializer classes of every app whose resources the API router serves (`<app>/api/serializers.py`)."""
    modules = {viewset.__module__.rsplit(".", 1)[0] + ".serializers" for _prefix, viewset, _basename in router.registry}
    for module in map(importlib.import_module, sorted(modules)):
        for item in vars(module).values():
            if (
                isinstance(item, type)
                and issubclass(item, serializers.Serializer)
                and item.__module__ == module.__name__
            ):
                yield item


def _nullable_columns_not_allowing_null(serializer_class) -> list[str]:
    """Fields of `serializer_class` (a ModelSerializer's) whose source is a nullable column, or passes through a
    nullable foreign key, that do not allow null."""
    model = getattr(getattr(serializer_class, "Meta", None), "model", None)
    if model is None:
        return []
    found = []
    for name, field in serializer_class().fields.items():
        if field.source == "*" or field.allow_null:
            continue
        owner, nullable = model, False
        for part in field.source.split("."):
            try:
                column = owner._meta.get_field(part)
            except (AttributeError, FieldDoesNotExist):  # a property or a method: not a column
                nullable = False
                break
            if not column.concrete:  # the rows of a reverse relation: a list, never null
                nullable = False
                break
            nullable = nullable or column.null
            owner = column.related_model
        if nullable:
            found.append(f"{serializer_class.__name__}.{name}")
    return found


def test_every_field_of_a_nullable_column_allows_null():
    wrong = [name for cls in _api_serializers() for name in _nullable_columns_not_allowing_null(cls)]
    assert wrong == [], f"nullable columns whose field is not nullable in the schema: {wrong}"


def test_the_guard_finds_a_nullable_relation_declared_without_allow_null():
    class Careless(serializers.ModelSerializer):
        created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

        class Meta:
            model = TeamVolume
            fields = ["name", "created_by"]

    assert _nullable_columns_not_allowing_null(Careless) == ["Careless.created_by"]
    assert any(cls.__name__ == "TeamVolumeSerializer" for cls in _api_serializers())
