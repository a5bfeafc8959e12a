"""Record who changed what. Services call `record` inside their transaction, so an audit row exists exactly when
the change it describes was committed."""

from decimal import Decimal

from django.db import models
from django.forms.models import model_to_dict

from .models import AuditEntry


def snapshot(instance: models.Model | None) -> dict | None:
    """The concrete field values of `instance` as JSON-safe data (None for no object)."""
    if instance is None:
        return None
    data = model_to_dict(instance, fields=[f.name for f in instance._meta.concrete_fields])
    return {key: _json_safe(value) for key, value in data.items()}


def _json_safe(value):
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def record(*, actor, action: str, instance: models.Model, before: dict | None, after: dict | None) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        before=before,
        after=after,
    )
