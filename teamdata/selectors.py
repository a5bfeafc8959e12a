"""Reads of a team's volumes and secrets: what a page lists, the one check that a job refers only to its own
team's volumes and secrets, the one rule of which volumes a user's job may write, and of which storage classes new
volumes may use."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from portal.models import Team

from .choices import AccessMode, SecretKind, VolumeSource, VolumeState
from .models import TeamSecret, TeamVolume

SINGLE_NODE_ACCESS_MODES = frozenset({AccessMode.READ_WRITE_ONCE, AccessMode.READ_WRITE_ONCE_POD})


def team_data(team: Team) -> dict:
    """The team page's section: its volumes and secrets (names, kinds, keys and states; never a value)."""
    return {
        "team_volumes": list(TeamVolume.objects.filter(team=team).select_related("created_by").order_by("name")),
        "team_secrets": list(
            TeamSecret.objects.filter(team=team).select_related("created_by", "rotated_by").order_by("name")
        ),
    }


def usable_by_team(user) -> list[dict]:
    """For the submit page: per team the user may submit for, the names of its volumes and secrets (with keys)."""
    teams = list(Team.objects.visible_to(user).order_by("name"))
    volumes: dict[int, list] = {}
    secrets: dict[int, list] = {}
    for volume in TeamVolume.objects.filter(team__in=teams).order_by("name"):
        volumes.setdefault(volume.team_id, []).append(volume)
    for secret in TeamSecret.objects.filter(team__in=teams).order_by("name"):
        secrets.setdefault(secret.team_id, []).append(secret)
    return [
        {"team": team, "volumes": volumes.get(team.pk, []), "secrets": secrets.get(team.pk, [])}
        for team in teams
        if team.pk in volumes or team.pk in secrets
    ]


def check_job_references(*, team: Team, spec) -> None:
    """Refuse a job spec that names a volume or secret its team does not have (another team's is exactly as
    unknown as one that does not exist), a failed volume, a volume one node only can attach in a job on several
    nodes, a secret key the secret does not hold, named secrets as image pull credentials, or image pull credentials
    as an environment source (so that nobody who may submit can print the registry password)."""
    errors = {}
    names = [item.get("name") for item in spec.volumes]
    if names:
        volumes = {volume.name: volume for volume in TeamVolume.objects.filter(team=team, name__in=names)}
        unknown = sorted({name for name in names if name not in volumes})
        failed = sorted({name for name, volume in volumes.items() if volume.state == VolumeState.FAILED})
        problems = []
        if unknown:
            problems.append(
                _("%(team)s has no volume named %(names)s.") % {"team": team.name, "names": ", ".join(unknown)}
            )
        for name in failed:
            problems.append(
                _("Volume %(name)s cannot be used: %(reason)s") % {"name": name, "reason": volumes[name].state_reason}
            )
        if isinstance(spec.nodes, int) and spec.nodes > 1:
            problems += _single_node_volume_problems(volumes=[volumes[name] for name in sorted(volumes)], spec=spec)
        if problems:
            errors["volumes"] = " ".join(problems)
    wanted = set(spec.image_pull_secrets) | {ref.get("secret") for ref in spec.secret_env.values()}
    secrets = {secret.name: secret for secret in TeamSecret.objects.filter(team=team, name__in=wanted)}
    pull_problems = []
    for name in spec.image_pull_secrets:
        if name not in secrets:
            pull_problems.append(_("%(team)s has no secret named %(name)s.") % {"team": team.name, "name": name})
        elif secrets[name].kind != SecretKind.REGISTRY:
            pull_problems.append(_("%(name)s is not an image pull credential.") % {"name": name})
    if pull_problems:
        errors["image_pull_secrets"] = " ".join(pull_problems)
    env_problems = []
    for env_name, ref in spec.secret_env.items():
        secret = secrets.get(ref.get("secret"))
        if secret is None:
            env_problems.append(
                _("%(team)s has no secret named %(name)s.") % {"team": team.name, "name": ref.get("secret")}
            )
        elif secret.kind == SecretKind.REGISTRY:
            # Its only key holds the registry password: a job names it as a pull secret, never reads it.
            env_problems.append(
                _("%(env)s: %(name)s holds image pull credentials, which a job can only name as an image pull secret.")
                % {"env": env_name, "name": secret.name}
            )
        elif ref.get("key") not in secret.keys:
            env_problems.append(
                _("%(env)s: secret %(name)s has no key %(key)s (it has: %(keys)s).")
                % {"env": env_name, "name": secret.name, "key": ref.get("key"), "keys": ", ".join(secret.keys)}
            )
    if env_problems:
        errors["secret_env"] = " ".join(env_problems)
    if errors:
        raise ValidationError(errors)


def _single_node_volume_problems(*, volumes: list[TeamVolume], spec) -> list[str]:
    """A job on several nodes (one pod per node) cannot mount a volume only one node can attach: its second pod would
    wait for the volume until the job's maximum run time, holding the gang's GPUs. An existing claim whose access
    mode the cluster has not told yet is refused until it has."""
    problems = []
    for volume in volumes:
        if volume.state == VolumeState.FAILED:
            continue
        if volume.source == VolumeSource.EXISTING and volume.checked_at is None:
            problems.append(
                _(
                    "Volume %(name)s cannot be mounted by a job on %(nodes)d nodes yet: its access mode has not been "
                    "read from the cluster; try again in a minute."
                )
                % {"name": volume.name, "nodes": spec.nodes}
            )
        elif volume.access_mode in SINGLE_NODE_ACCESS_MODES:
            problems.append(
                _(
                    "Volume %(name)s is %(mode)s, which one node only can attach: a job on %(nodes)d nodes cannot "
                    "mount it. Use a ReadWriteMany or ReadOnlyMany volume, or run on one node."
                )
                % {"name": volume.name, "mode": volume.access_mode, "nodes": spec.nodes}
            )
    return problems


def storage_class_allowed(name: str) -> bool:
    """Whether new team volumes may name storage class `name` (settings.VOLUME_STORAGE_CLASSES: exact names or
    prefixes ending in "*"). The empty name, the cluster's default class, is always allowed."""
    if not name:
        return True
    return any(
        name.startswith(entry[:-1]) if entry.endswith("*") else name == entry
        for entry in settings.VOLUME_STORAGE_CLASSES
    )


def read_only_volume_names(*, team: Team, user, names) -> set[str]:
    """Which of the team's volumes `names` a job of `user` must mount read-only whatever it asks: those a lead
    marked read-only for researchers, unless `user` leads the team or is a platform admin (no user: read-only)."""
    marked = set(
        TeamVolume.objects.filter(team=team, name__in=list(names), read_only_for_researchers=True).values_list(
            "name", flat=True
        )
    )
    if marked and user is not None and Team.objects.led_by(user).filter(pk=team.pk).exists():
        return set()
    return marked


def with_enforced_read_only(*, team: Team, user, volumes: list[dict]) -> list[dict]:
    """A job's volume mounts (`[{"name", "mount_path", "read_only"}]`) with `read_only_volume_names` forced on."""
    forced = read_only_volume_names(team=team, user=user, names={item.get("name") for item in volumes})
    return [{**item, "read_only": True} if item.get("name") in forced else item for item in volumes]
