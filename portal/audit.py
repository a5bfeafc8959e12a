"""Record who changed what. Services call `record` inside their transaction, so an audit row exists exactly when
the change it describes was committed."""

from decimal import Decimal

from django.db import models
from django.forms.models import model_to_dict

from .models import AuditEntry

# Never copied into the audit log: environment values (they may hold secrets; the names are kept), password or
# token hashes, and a provider's OAuth tokens (allauth's SocialToken).
REDACTED = "(redacted)"
HIDDEN_FIELDS = ("password", "key_hash", "token", "token_secret")
REDACTED_MAPPINGS = ("env",)


def snapshot(instance: models.Model | None, *, relations: tuple[str, ...] = ()) -> dict | None:
    """The concrete field values of `instance` as JSON-safe data (None for no object), secrets redacted, and for each
    many-to-many relation named in `relations` the natural keys of the rows it holds now (e.g. a user's permissions)."""
    if instance is None:
        return None
    data = model_to_dict(instance, fields=[f.name for f in instance._meta.concrete_fields])
    data = {key: _json_safe(value) for key, value in data.items()}
    for name in relations:
        data[name] = sorted((_natural_key(row) for row in getattr(instance, name).all()), key=str)
    for name in HIDDEN_FIELDS:
        if name in data:
            data[name] = "(hidden)"
    return redact(data)


def redact(value):
    """`value` with the values of every `env` mapping in it, at any depth, replaced by REDACTED."""
    if isinstance(value, dict):
        return {
            key: (
                dict.fromkeys(item, REDACTED) if key in REDACTED_MAPPINGS and isinstance(item, dict) else redact(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def _natural_key(row: models.Model):
    key = row.natural_key() if hasattr(row, "natural_key") else (row.pk,)
    return _json_safe(key[0] if len(key) == 1 else list(key))


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


def record(
    *, actor, action: str, instance: models.Model, before: dict | None, after: dict | None, actor_name: str = ""
) -> AuditEntry:
    """`actor` is the signed-in user who made the change; without one, `actor_name` names who did (e.g. the identity
    provider, "oidc:<issuer>"); both empty: the system."""
    actor = actor if actor is not None and actor.is_authenticated else None
    return AuditEntry.objects.create(
        actor=actor,
        actor_username=actor.get_username() if actor is not None else actor_name[:150],
        action=action,
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        before=before,
        after=after,
    )
