"""Writes to a team's volumes and secrets. Platform admins and the team's leads make them; every one is audited.

Volumes: registering one saves the row as Pending and, through the outbox, has `teamdata.ensure_volume`
(reconcile/volumes.py) create the claim (for a new one) and record what the cluster says of it with `record_claim`.
The claim's later changes are recorded by the periodic `teamdata.refresh_volumes`.

Secrets: a value must never reach PostgreSQL, Redis or a log, so a secret cannot wait in the outbox or a task
queue like other cluster writes. `save_secret` writes the Secret to the cluster itself, inside the transaction
that saves its row (name, kind, keys, who and when) and the audit entry; if the cluster refuses or cannot be
reached, the transaction rolls back and nothing is left behind. Should the commit fail after the cluster took the
Secret, saving it again replaces that Secret (it carries the portal's label), so a retry converges. Saves of one
secret (team and name) run one at a time: a second one that comes while the first is under way is refused at once
with a field error (it does not wait behind the first one's cluster calls). No frame of a save shows its variables in
an error report (`sensitive_variables`), and the views that take values hide them from the report's POST table.
"""

import hashlib
import logging
import math

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_variables

from cluster import resources
from cluster.errors import ClusterError, NamespaceNotMade, single_attempt
from cluster.team_data import DOCKER_CONFIG_KEY, render_opaque_secret, render_registry_secret
from jobs.specs import SECRET_KEY
from portal import audit, outbox
from portal.models import Team

from .choices import SecretKind, VolumeSource, VolumeState
from .models import TeamSecret, TeamVolume
from .selectors import storage_class_allowed

log = logging.getLogger(__name__)

MAX_SECRET_BYTES = 512 * 1024  # the apiserver refuses Secrets over 1 MiB; keep well below
REGISTRY_HOST = r"^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-zA-Z0-9._/-]*)?\Z"


def check_may_manage(*, user, team: Team) -> None:
    """Platform admins and the team's leads manage its volumes and secrets; anyone else is refused."""
    if not Team.objects.led_by(user).filter(pk=team.pk).exists():
        raise PermissionDenied(_("Only platform admins and the team's leads manage its volumes and secrets."))


def ensure_namespace(team: Team) -> None:
    """The team namespace exists as the portal wants it before a secret is put in it. The one call from the domain up
    to a reconciler (pyproject.toml's floors allow exactly this import): a secret is written from the request, since
    its value may never wait in a queue. Raises ClusterError."""
    from reconcile.namespaces import ensure

    ensure(team, made_once_is_enough=True)


# --- volumes ---------------------------------------------------------------------------------------------------


def _capacity_gib(capacity: str) -> int:
    """A claim's capacity as the cluster reports it (e.g. "80Gi", "100G"), in whole GiB rounded up; 0 when unknown."""
    from kubernetes.utils import parse_quantity

    try:
        return math.ceil(parse_quantity(capacity) / 2**30) if capacity else 0
    except ValueError:
        return 0


def _check_volume_limits(*, team: Team, volume: TeamVolume) -> dict:
    """The team's caps (its NamespaceLimits: number of volumes, total GiB of their claims: the size a new one asks
    for, the capacity the cluster reported of an existing one, as the namespace's ResourceQuota counts them) and the
    storage class allowlist, for a volume about to be registered. The caller holds the team's row lock.

    Claims of the namespace that no registered volume stands for (one a lead unregistered: it stays; one made around
    the portal) count in the quota but not here; the message at the cap says so."""
    from pools.models import NamespaceLimits

    limits = NamespaceLimits.objects.filter(team=team).first() or NamespaceLimits(team=team)
    registered = TeamVolume.objects.filter(team=team)
    errors = {}
    count = registered.count()
    if count + 1 > limits.max_volumes:
        errors["name"] = _(
            "%(team)s may have at most %(max)d volumes and has %(count)d. Removing a volume only forgets it: its claim "
            "stays in the namespace and still counts, so an admin deletes a claim there first (a Failed volume "
            "without a claim can simply be removed)."
        ) % {"team": team.name, "max": limits.max_volumes, "count": count}
    if volume.source == VolumeSource.CREATED and volume.size_gib:
        used = registered.filter(source=VolumeSource.CREATED).aggregate(total=Sum("size_gib"))["total"] or 0
        used += sum(
            _capacity_gib(capacity)
            for capacity in registered.filter(source=VolumeSource.EXISTING).values_list("capacity", flat=True)
        )
        left = max(limits.max_volume_storage_gib - used, 0)
        if volume.size_gib > left:
            errors["size_gib"] = _(
                "%(team)s's volumes may request %(max)d GiB in all; %(left)d GiB are left, not %(size)d."
            ) % {"team": team.name, "max": limits.max_volume_storage_gib, "left": left, "size": volume.size_gib}
    if volume.source == VolumeSource.CREATED and not storage_class_allowed(volume.storage_class):
        allowed = ", ".join(settings.VOLUME_STORAGE_CLASSES)
        errors["storage_class"] = (
            _("Storage class %(name)s is not open to team volumes; use one of: %(allowed)s.")
            % {"name": volume.storage_class, "allowed": allowed}
            if allowed
            else _("Team volumes use the cluster's default storage class: leave the class empty.")
        )
    return errors


@transaction.atomic
def register_volume(
    *,
    team: Team,
    user,
    name: str,
    source: str,
    size_gib: int | None = None,
    access_mode: str = "",
    storage_class: str = "",
    read_only_for_researchers: bool = False,
) -> TeamVolume:
    """Register a claim for the team's jobs: an existing one of the namespace, or a new one the portal creates,
    within the team's volume caps and the storage class allowlist. Saved Pending; the claim is created (if new) and
    its state recorded by `teamdata.ensure_volume`.

    Registrations of one team are taken one at a time (the team's row lock), so two at once can neither both pass
    a cap nor both take a name: the second is told, beside the field, what the first left it."""
    check_may_manage(user=user, team=team)
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    volume = TeamVolume(
        team=team, name=name, source=source, created_by=user, read_only_for_researchers=read_only_for_researchers
    )
    if source == VolumeSource.CREATED:
        volume.size_gib, volume.storage_class = size_gib, storage_class
        if access_mode:
            volume.access_mode = access_mode
    volume.state_reason = _("waiting for the cluster")
    if TeamVolume.objects.filter(team=team, name=name).exists():
        raise ValidationError(
            {"name": _("%(team)s already has a volume named %(name)s.") % {"team": team.name, "name": name}}
        )
    volume.full_clean()
    errors = _check_volume_limits(team=team, volume=volume)
    if errors:
        raise ValidationError(errors)
    volume.save()
    audit.record(actor=user, action="volume.register", instance=volume, before=None, after=audit.snapshot(volume))
    outbox.send("teamdata.ensure_volume", volume.pk)
    return volume


@transaction.atomic
def set_read_only_for_researchers(*, volume: TeamVolume, user, read_only: bool) -> TeamVolume:
    """Mark a volume read-only for researchers (their jobs mount it read-only whatever they ask; jobs not yet
    started are rendered so too), or let them write again. Leads and admins only; audited."""
    check_may_manage(user=user, team=volume.team)
    volume = TeamVolume.objects.select_for_update().get(pk=volume.pk)
    if volume.read_only_for_researchers == read_only:
        return volume
    before = audit.snapshot(volume)
    volume.read_only_for_researchers = read_only
    volume.save(update_fields=["read_only_for_researchers"])
    audit.record(actor=user, action="volume.access", instance=volume, before=before, after=audit.snapshot(volume))
    return volume


@transaction.atomic
def unregister_volume(*, volume: TeamVolume, user) -> None:
    """Forget a volume: jobs can no longer mount it. The claim and its data stay in the namespace (the portal never
    deletes a team's data; an admin deletes the claim in the cluster if it is no longer wanted)."""
    check_may_manage(user=user, team=volume.team)
    before = audit.snapshot(volume)
    audit.record(actor=user, action="volume.unregister", instance=volume, before=before, after=None)
    volume.delete()


def _claim_state(claim) -> tuple[str, str]:
    if claim.phase == "Bound":
        return VolumeState.BOUND, ""
    if claim.phase == "Lost":
        return VolumeState.LOST, _("the claim lost its volume")
    return VolumeState.PENDING, ""


@transaction.atomic
def record_claim(*, volume_id: int, claim, warning: str = "", missing_reason: str = "", as_of=None) -> bool:
    """Record what the cluster said of a volume's claim (`claim`: ClaimFacts, or None when there is none, with
    `missing_reason`) at `as_of` (when it was read; default now), which becomes the volume's `checked_at`. Facts
    older than those already recorded are ignored (a sweep's list taken before a task recorded the claim it just
    made). Audited as the system when the state changes. True when something changed."""
    volume = TeamVolume.objects.select_for_update(of=("self",)).filter(pk=volume_id).first()  # not the team's row
    as_of = as_of or timezone.now()
    if volume is None or (volume.checked_at is not None and volume.checked_at > as_of):
        return False
    before = audit.snapshot(volume)
    if claim is None:
        state, reason = VolumeState.FAILED, missing_reason
    else:
        state, reason = _claim_state(claim)
        if state == VolumeState.PENDING:
            reason = warning or _("waiting for a volume to bind the claim")
        volume.capacity = claim.capacity
        if volume.source == VolumeSource.EXISTING and claim.access_modes:
            volume.access_mode = claim.access_modes[0]
        if volume.source == VolumeSource.EXISTING:
            volume.storage_class = claim.storage_class
    previous_state = volume.state
    changed = volume.transition_to(state, reason=reason)
    volume.checked_at = as_of
    volume.save()
    if previous_state != volume.state:
        audit.record(
            actor=None, action=f"volume.{volume.state}", instance=volume, before=before, after=audit.snapshot(volume)
        )
    return changed


# --- secrets ---------------------------------------------------------------------------------------------------


def _check_values(kind: str, values: dict[str, str], registry: str, username: str, password: str) -> dict:
    import re

    errors = {}
    if kind == SecretKind.REGISTRY:
        if not registry or not re.match(REGISTRY_HOST, registry) or len(registry) > 253:
            errors["registry"] = _("Give the registry's host, e.g. registry.example.com or registry.example.com:5000.")
        if not username:
            errors["username"] = _("Give the user name for the registry.")
        if not password:
            errors["password"] = _("Give the password or token for the registry.")
    elif kind == SecretKind.OPAQUE:
        if not values:
            errors["values"] = _("Give at least one KEY=value pair.")
        # Named by position, never echoed: a pasted line split at a value's '=' makes the value part of the "key".
        bad = [str(position) for position, key in enumerate(values, start=1) if not SECRET_KEY.match(key)]
        if bad:
            errors["values"] = _(
                "Keys may hold only letters, digits, '-', '_' and '.', and may not be '.' or start with '..'; not so: "
                "key %(positions)s (counted from 1)."
            ) % {"positions": ", ".join(bad)}
        elif sum(len(key) + len(value.encode()) for key, value in values.items()) > MAX_SECRET_BYTES:
            errors["values"] = _("A secret holds at most %(kib)d KiB.") % {"kib": MAX_SECRET_BYTES // 1024}
    else:
        errors["kind"] = _("Choose image pull credentials or a named secret.")
    return errors


def _lock_secret_name(*, team: Team, name: str) -> bool:
    """Take the transaction's PostgreSQL advisory lock on the team's secret `name` without waiting; False when another
    transaction holds it (a save of the same secret is under way)."""
    digest = hashlib.blake2b(f"teamdata.secret:{team.pk}:{name}".encode(), digest_size=8).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [int.from_bytes(digest, "big", signed=True)])
        return cursor.fetchone()[0]


@sensitive_variables()
@transaction.atomic
def save_secret(
    *,
    team: Team,
    user,
    name: str,
    kind: str,
    values: dict[str, str] | None = None,
    registry: str = "",
    username: str = "",
    password: str = "",
    create_only: bool = False,
) -> TeamSecret:
    """Create a team secret, or rotate it when the team already has one of that name (same kind) and
    `create_only` is false: the Secret in the namespace is written with the new values (all of them: keys not
    given are removed), the row records who and when. Values go to the cluster only (see module docstring)."""
    check_may_manage(user=user, team=team)
    values = values or {}
    if not _lock_secret_name(team=team, name=name):
        raise ValidationError(
            {
                "name": _("Secret %(name)s is being saved by another request right now: try again in a moment.")
                % {"name": name}
            }
        )
    secret = TeamSecret.objects.select_for_update(of=("self",)).filter(team=team, name=name).first()  # not the team's
    errors = _check_values(kind, values, registry, username, password)
    if secret is not None and create_only:
        errors["name"] = _("The team already has a secret of that name: rotate it instead.")
    if secret is not None and secret.kind != kind:
        errors["kind"] = _("%(name)s holds %(kind)s: rotate it with the same kind, or choose another name.") % {
            "name": name,
            "kind": secret.get_kind_display(),
        }
    created = secret is None
    before = None if created else audit.snapshot(secret)
    if created:
        secret = TeamSecret(team=team, name=name, kind=kind, created_by=user)
    try:
        secret.full_clean(exclude=["keys"])
    except ValidationError as error:
        errors.update({key: " ".join(messages) for key, messages in error.message_dict.items()})
    if errors:
        raise ValidationError(errors)
    common = {"name": name, "namespace": team.namespace, "team_slug": team.slug}
    if kind == SecretKind.REGISTRY:
        manifest = render_registry_secret(**common, registry=registry, username=username, password=password)
        secret.keys, secret.registry = [DOCKER_CONFIG_KEY], registry
    else:
        manifest = render_opaque_secret(**common, values=values)
        secret.keys, secret.registry = sorted(values), ""
    if not created:
        secret.version += 1
        secret.rotated_by, secret.rotated_at = user, timezone.now()
    secret.save()
    try:
        with single_attempt():  # inside this transaction: tried once, never slept on (portal/retry.py)
            ensure_namespace(team)
    except NamespaceNotMade:
        # The web process may not make a namespace (the chart gives that right to the worker only), so a team whose
        # namespace the worker has not made yet gets this, not the API server's 403.
        raise ValidationError(
            _(
                "The team's namespace is not in the cluster yet (the worker makes it a moment after the team is "
                "created): nothing was saved. Try again in a minute."
            )
        ) from None
    except ClusterError as error:
        raise ValidationError(
            _("The cluster did not take the secret, nothing was saved: %(why)s") % {"why": error}
        ) from None
    try:
        with single_attempt():
            resources.apply_secret(manifest)
    except resources.NotManagedByPortal:
        raise ValidationError(
            {
                "name": _("A secret named %(name)s already exists in %(namespace)s and was not made by the portal.")
                % {"name": name, "namespace": team.namespace}
            }
        ) from None
    except ClusterError as error:
        log.warning("secret %s of team %s not saved: %s", name, team.slug, error)
        raise ValidationError(
            _("The cluster did not take the secret, nothing was saved: %(why)s") % {"why": error}
        ) from None
    action = "secret.create" if created else "secret.rotate"
    audit.record(actor=user, action=action, instance=secret, before=before, after=audit.snapshot(secret))
    return secret


@transaction.atomic
def delete_secret(*, secret: TeamSecret, user) -> None:
    """Delete a team secret and its Secret in the namespace (jobs that reference it can no longer start)."""
    check_may_manage(user=user, team=secret.team)
    secret = TeamSecret.objects.select_for_update().get(pk=secret.pk)
    before = audit.snapshot(secret)
    try:
        with single_attempt():  # inside this transaction: tried once, never slept on (portal/retry.py)
            resources.delete_secret(secret.team.namespace, secret.name)
    except ClusterError as error:
        raise ValidationError(_("The cluster did not delete the secret: %(why)s") % {"why": error}) from None
    audit.record(actor=user, action="secret.delete", instance=secret, before=before, after=None)
    secret.delete()
