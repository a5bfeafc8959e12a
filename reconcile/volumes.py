"""Team volumes in the cluster: each registered volume's PersistentVolumeClaim is made (for a volume the portal
creates) and its state recorded (`teamdata.services.record_claim`); the periodic refresh records every claim's
state from one list. The rows are written by teamdata/services.py (register, unregister), which sends
`teamdata.ensure_volume` (reconcile/tasks.py) through the outbox.

The task is only the fast path: its message can be lost, or it can give up while the apiserver is away longer than
its retries. A volume nothing has examined yet (`checked_at` empty: its claim was never made or read back) is
therefore not judged from the refresh's list, which would call it Failed for a claim nobody made yet; the refresh
runs `ensure_volume` for it instead, so its claim is made once the apiserver is back (creating is idempotent). A
volume once examined is only recorded: a claim someone deleted by hand after it was made is not made again, the
volume is Failed and says there is no claim. Each record carries the time its facts were read, and facts older than
the volume's `checked_at` are not written over newer ones (the refresh's list taken before the task recorded the
claim it had just made)."""

import logging

from django.utils import timezone
from django.utils.translation import gettext as _

from cluster import resources
from cluster.errors import ClusterError
from cluster.team_data import render_claim
from teamdata.choices import VolumeSource
from teamdata.models import TeamVolume
from teamdata.services import record_claim

from .namespaces import ensure as ensure_namespace

log = logging.getLogger(__name__)


def _storage_class_of(volume: TeamVolume):
    """The cluster's facts of the class a new claim is made in (its own, or the cluster's default when it names
    none), or why there is none. The claim names it explicitly: a claim without a class in a cluster without a
    default class would bind any volume made without a class."""
    if volume.storage_class:
        found = resources.read_storage_class(volume.storage_class)
        return found or _("the cluster has no storage class %(name)s") % {"name": volume.storage_class}
    default = next((item for item in resources.storage_classes() if item.is_default), None)
    return default or _("the cluster has no default storage class: register the volume with a storage class")


def ensure_volume(volume: TeamVolume) -> str:
    """Make the volume's claim exist (a new one is created, carrying the portal's label) and record its state.
    A new claim of a class without a provisioner binds only a volume an admin assigned to the team (labelled
    `reservoir.io/team: <slug>`, cluster.team_data.render_claim), never a volume made ahead of time for another
    team or for nobody. Idempotent: the claim's name is the volume's, and an existing claim counts as created.
    Raises ClusterError on a cluster failure (the task retries transient ones)."""
    namespace = volume.team.namespace
    if volume.source == VolumeSource.CREATED:
        storage_class = _storage_class_of(volume)
        if isinstance(storage_class, str):
            record_claim(volume_id=volume.pk, claim=None, missing_reason=storage_class)
            return "no such class"
        ensure_namespace(volume.team)
        manifest = render_claim(
            name=volume.name,
            namespace=namespace,
            team_slug=volume.team.slug,
            size_gib=volume.size_gib,
            access_mode=volume.access_mode,
            storage_class=storage_class.name,
            assigned_volumes_only=not storage_class.provisions,
        )
        try:
            resources.create_claim(manifest)
        except ClusterError as error:
            if error.transient:
                raise
            record_claim(
                volume_id=volume.pk,
                claim=None,
                missing_reason=_("the cluster refused the claim: %(why)s") % {"why": error},
            )
            return "refused"
    read_at = timezone.now()
    claim = resources.read_claim(namespace, volume.name)
    if claim is not None and volume.source == VolumeSource.CREATED and not claim.managed:
        record_claim(
            volume_id=volume.pk,
            as_of=read_at,
            claim=None,
            missing_reason=_("a claim named %(name)s already exists in %(namespace)s and was not made by the portal")
            % {"name": volume.name, "namespace": namespace},
        )
        return "not ours"
    warning = resources.claim_warning(namespace, volume.name) if claim is not None and claim.phase == "Pending" else ""
    record_claim(
        volume_id=volume.pk,
        as_of=read_at,
        claim=claim,
        warning=warning,
        missing_reason=_("there is no claim named %(name)s in %(namespace)s")
        % {"name": volume.name, "namespace": namespace},
    )
    return claim.phase if claim is not None else "missing"


def refresh_volumes() -> int:
    """Record the state of every registered volume's claim from one list of the cluster's claims (a pending one
    also gets its newest warning); a volume not examined yet is made and examined by `ensure_volume` instead (see
    module docstring). A volume recorded after the list was taken keeps what was recorded. Returns how many volumes
    changed (or were examined)."""
    listed_at = timezone.now()
    claims = resources.list_claims()
    changed = 0
    for volume in TeamVolume.objects.select_related("team").order_by("pk"):
        namespace = volume.team.namespace
        if volume.checked_at is None:
            try:
                outcome = ensure_volume(volume)
            except ClusterError as error:  # left Pending for the next run, which is the retry
                log.warning("volume %s of %s: claim not made yet: %s", volume.name, volume.team.slug, error)
                continue
            log.info("volume %s of %s examined by the refresh: %s", volume.name, volume.team.slug, outcome)
            changed += 1
            continue
        claim = claims.get((namespace, volume.name))
        if claim is not None and volume.source == VolumeSource.CREATED and not claim.managed:
            claim = None
        warning = (
            resources.claim_warning(namespace, volume.name) if claim is not None and claim.phase == "Pending" else ""
        )
        changed += record_claim(
            volume_id=volume.pk,
            as_of=listed_at,
            claim=claim,
            warning=warning,
            missing_reason=_("there is no claim named %(name)s in %(namespace)s")
            % {"name": volume.name, "namespace": namespace},
        )
    return changed
