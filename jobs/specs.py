"""What a user asks for when submitting a job, validated in one place for the form, the API and resubmission."""

import re
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from .choices import Placement, Priority

# An OCI image reference: [registry[:port]/]path[:tag][@digest], lowercase path components.
IMAGE_REFERENCE = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}))?\Z"
)
# Every pattern ends in \Z, never $: `$` also matches before a trailing newline ("name\n" would pass).
JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
MAX_GPUS_PER_JOB = 64  # per pod (per node)
MAX_NODES_PER_JOB = 64
MAX_RETRIES = 10
# A stopped pod's time to checkpoint (terminationGracePeriodSeconds): Kubernetes' default, and at most an hour in
# the database. The platform's cap, settings.JOB_MAX_GRACE_SECONDS (default 60), is what a job may ask for: a lender
# waits for its reclaimed GPUs at most that long (`max_grace_seconds`).
DEFAULT_TERMINATION_GRACE_SECONDS = 30
MAX_TERMINATION_GRACE_SECONDS = 3600
# Read by the NVIDIA container toolkit when it sets a container up: NVIDIA_VISIBLE_DEVICES=all would show the
# container every GPU of its node, outside the quota and metering. The device plugin sets them; users never do.
# CUDA_VISIBLE_DEVICES stays allowed: CUDA reads it inside the container and can only narrow the GPUs the
# container was given, never add one.
RESERVED_ENV_PREFIX = "NVIDIA_"
# Annotation prefixes (and their subdomains) that belong to Kubernetes, the portal, the schedulers and autoscalers:
# AppArmor and seccomp profiles, cluster-autoscaler's safe-to-evict, Kueue's and seed 000's scheduling keys.
RESERVED_ANNOTATION_DOMAINS = (
    "reservoir.io",
    "scheduling.eks.ebcloud.com",
    "kueue.x-k8s.io",
    "kubernetes.io",
    "k8s.io",
    "karpenter.sh",
    "nvidia.com",
)


@dataclass
class JobSpec:
    name: str
    image: str
    gpus: int
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cpu_millicores: int = 1000
    memory_mib: int = 4096
    placement: str = Placement.STRICT
    spill_after_minutes: int | None = None
    priority: int = Priority.NORMAL
    max_run_minutes: int = 24 * 60
    anti_affinity_group: str = ""
    pod_annotations: dict[str, str] = field(default_factory=dict)
    # Team data (teamdata app): [{"name": <team volume>, "mount_path": "/data", "read_only": true}], /dev/shm in
    # GiB (0: none), image pull secrets by name, {"ENV_NAME": {"secret": <team secret>, "key": <its key>}}.
    volumes: list[dict] = field(default_factory=list)
    shm_gib: int = 0
    image_pull_secrets: list[str] = field(default_factory=list)
    secret_env: dict[str, dict] = field(default_factory=dict)
    nodes: int = 1  # pods, one per node, each with `gpus` GPUs
    retries: int = 0  # failed pods replaced before the job fails (the Job's backoffLimit)
    # Seconds a pod has between SIGTERM and SIGKILL when it is stopped (preempted, cancelled, out of time): time for
    # a checkpoint. The pods' terminationGracePeriodSeconds; Kubernetes' own default is 30.
    termination_grace_seconds: int = DEFAULT_TERMINATION_GRACE_SECONDS

    @property
    def total_gpus(self) -> int:
        """GPUs of all the job's pods: what its team's quota, the queue and the fit count (see `Job.total_gpus`)."""
        return self.gpus * self.nodes if isinstance(self.gpus, int) and isinstance(self.nodes, int) else 0

    def as_model_fields(self) -> dict:
        return asdict(self)

    @classmethod
    def from_job(cls, job) -> "JobSpec":
        return cls(**{name: getattr(job, name) for name in cls.__dataclass_fields__})


def max_grace_seconds() -> int:
    """The longest grace period a job may ask for: the platform's cap (settings.JOB_MAX_GRACE_SECONDS), within the
    hour the database allows."""
    return max(0, min(settings.JOB_MAX_GRACE_SECONDS, MAX_TERMINATION_GRACE_SECONDS))


def default_grace_seconds() -> int:
    """A job's grace period when it asks for none: Kubernetes' 30 s, or the cap when that is lower."""
    return min(DEFAULT_TERMINATION_GRACE_SECONDS, max_grace_seconds())


def image_registry(image: str) -> str:
    """The registry host (with its port) an image reference pulls from, as the container runtime reads it: the first
    path component when it has a '.' or ':' or is 'localhost', else Docker Hub ('docker.io')."""
    first, slash, _rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first.lower()
    return "docker.io"


def registry_is_allowed(image: str) -> bool:
    """On settings.JOB_IMAGE_REGISTRIES (registry hosts, with a port where the registry has one); empty: any."""
    allowed = [entry.strip().lower() for entry in settings.JOB_IMAGE_REGISTRIES if entry.strip()]
    return not allowed or image_registry(image) in allowed


def _whole(value, name: str, errors: dict, *, minimum: int, maximum: int | None = None, label: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name] = _("%(label)s must be a whole number.") % {"label": label}
    elif value < minimum:
        errors[name] = _("%(label)s must be at least %(min)d.") % {"label": label, "min": minimum}
    elif maximum is not None and value > maximum:
        errors[name] = _("%(label)s can be at most %(max)d.") % {"label": label, "max": maximum}


def annotation_is_reserved(key: str) -> bool:
    """A key whose prefix is one of RESERVED_ANNOTATION_DOMAINS or a subdomain of one."""
    prefix, slash, _name = key.rpartition("/")
    if not slash:
        return False
    prefix = prefix.lower()
    return any(prefix == domain or prefix.endswith("." + domain) for domain in RESERVED_ANNOTATION_DOMAINS)


def annotation_is_allowed(key: str) -> bool:
    """On settings.POD_ANNOTATION_ALLOWLIST: an exact key, or a pattern ending in `*` that matches by prefix."""
    for entry in settings.POD_ANNOTATION_ALLOWLIST:
        if entry.endswith("*") and key.startswith(entry[:-1]) or key == entry:
            return True
    return False


def _size(*parts) -> int:
    return sum(len(str(part).encode()) for part in parts)


def _check_sizes(spec: JobSpec, errors: dict) -> None:
    limits = (
        ("env", _size(*spec.env.keys(), *spec.env.values()), settings.JOB_ENV_MAX_BYTES, _("Environment variables")),
        (
            "pod_annotations",
            _size(*spec.pod_annotations.keys(), *spec.pod_annotations.values()),
            settings.JOB_ANNOTATIONS_MAX_BYTES,
            _("Pod annotations"),
        ),
        (
            "command",
            _size(*spec.command, *spec.args),
            settings.JOB_COMMAND_MAX_BYTES,
            _("The command and its arguments"),
        ),
    )
    for name, size, limit, label in limits:
        if size > limit and name not in errors:
            errors[name] = _("%(label)s take %(size)d bytes; at most %(max)d are allowed.") % {
                "label": label,
                "size": size,
                "max": limit,
            }


def _check_annotations(annotations: dict, errors: dict) -> None:
    keys = [str(key) for key in annotations]
    bad = [key for key in keys if not ANNOTATION_KEY.match(key)]
    reserved = [key for key in keys if key not in bad and annotation_is_reserved(key)]
    unknown = [key for key in keys if key not in bad and key not in reserved and not annotation_is_allowed(key)]
    problems = []
    if bad:
        problems.append(_("Invalid annotation keys: %(keys)s.") % {"keys": ", ".join(bad)})
    if reserved:
        problems.append(_("Reserved for the cluster and the portal: %(keys)s.") % {"keys": ", ".join(reserved)})
    if unknown:
        allowed = ", ".join(settings.POD_ANNOTATION_ALLOWLIST) or _("none")
        problems.append(
            _("Not on the annotation allowlist: %(keys)s (allowed: %(allowed)s).")
            % {"keys": ", ".join(unknown), "allowed": allowed}
        )
    if problems:
        errors["pod_annotations"] = " ".join(problems)


def validate_spec(spec: JobSpec) -> None:
    """Check the spec on its own (team and pool limits are checked by the submission service)."""
    errors: dict[str, str] = {}
    if not JOB_NAME.match(spec.name or ""):
        errors["name"] = _("Use up to 63 lowercase letters, digits and dashes, starting and ending with one.")
    if not spec.image or not IMAGE_REFERENCE.match(spec.image) or len(spec.image) > 255:
        errors["image"] = _("'%(image)s' is not an image reference like registry.example.com/team/train:1.0.") % {
            "image": spec.image
        }
    elif not registry_is_allowed(spec.image):
        errors["image"] = _("Images come from %(allowed)s on this portal, not from %(registry)s.") % {
            "allowed": ", ".join(settings.JOB_IMAGE_REGISTRIES),
            "registry": image_registry(spec.image),
        }
    _whole(spec.gpus, "gpus", errors, minimum=1, maximum=MAX_GPUS_PER_JOB, label=_("GPUs"))
    _whole(spec.nodes, "nodes", errors, minimum=1, maximum=MAX_NODES_PER_JOB, label=_("Nodes"))
    _whole(spec.retries, "retries", errors, minimum=0, maximum=MAX_RETRIES, label=_("Retries"))
    _whole(spec.cpu_millicores, "cpu_millicores", errors, minimum=100, maximum=512_000, label=_("CPU"))
    _whole(spec.memory_mib, "memory_mib", errors, minimum=64, maximum=4 * 1024 * 1024, label=_("Memory"))
    _whole(spec.max_run_minutes, "max_run_minutes", errors, minimum=1, maximum=30 * 24 * 60, label=_("Run time"))
    _whole(
        spec.termination_grace_seconds,
        "termination_grace_seconds",
        errors,
        minimum=0,
        maximum=max_grace_seconds(),
        label=_("Grace period"),
    )
    if spec.placement not in Placement.values:
        errors["placement"] = _("Choose strict, soft or spill-after placement.")
    if spec.placement == Placement.SPILL_AFTER:
        _whole(
            spec.spill_after_minutes,
            "spill_after_minutes",
            errors,
            minimum=1,
            maximum=7 * 24 * 60,
            label=_("Spill after"),
        )
    if spec.priority not in Priority.values:
        errors["priority"] = _("Choose low, normal or high priority.")
    if not all(isinstance(part, str) for part in [*spec.command, *spec.args]):
        errors["command"] = _("Command and arguments are lists of text.")
    bad_env = [key for key in spec.env if not ENV_NAME.match(str(key))]
    gpu_env = [key for key in spec.env if key not in bad_env and str(key).upper().startswith(RESERVED_ENV_PREFIX)]
    if bad_env:
        errors["env"] = _("Invalid variable names: %(names)s.") % {"names": ", ".join(bad_env)}
    elif gpu_env:
        errors["env"] = _(
            "Variables starting with NVIDIA_ decide which GPUs a container sees and are set by the cluster: "
            "remove %(names)s."
        ) % {"names": ", ".join(gpu_env)}
    if spec.anti_affinity_group and not JOB_NAME.match(spec.anti_affinity_group):
        errors["anti_affinity_group"] = _("Use lowercase letters, digits and dashes.")
    _check_annotations(spec.pod_annotations, errors)
    _check_sizes(spec, errors)
    check_team_data(spec, errors)
    if errors:
        raise ValidationError(errors)


# --- team data: volumes, shared memory, secrets by reference ---------------------------------------------------

# A Kubernetes object name of a claim or a secret (DNS-1123 label; the portal keeps both to 63 characters).
OBJECT_NAME = JOB_NAME
# Mount paths that belong to the container runtime or the system: a volume there would hide or replace them.
SYSTEM_PATHS = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib/kubelet",
)
MAX_MOUNTS = 16
MAX_PULL_SECRETS = 16
MAX_SECRET_ENV = 64
MAX_SHM_GIB = 1024
MIN_MEMORY_BESIDE_SHM_MIB = 1024


def mount_path_problem(path) -> str | None:
    """Why `path` cannot be a mount path (None when it can): absolute, normalised, and not a system path or
    under one (/dev/shm is the shared-memory option's own)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return _("'%(path)s' is not an absolute path.") % {"path": path}
    parts = path.split("/")[1:]
    if path != "/" and (path.endswith("/") or any(part in ("", ".", "..") for part in parts)):
        return _("'%(path)s' is not a plain path: no trailing slash, '.', '..' or '//'.") % {"path": path}
    if len(path) > 255 or any(ord(char) < 32 for char in path) or ":" in path:
        return _("'%(path)s' is not a usable path.") % {"path": path}
    for system in SYSTEM_PATHS:
        if path == system or (system != "/" and path.startswith(system + "/")):
            return _("%(path)s is a system path: mount volumes elsewhere, e.g. /data or /workspace.") % {"path": path}
    return None


def _check_volumes(volumes, errors: dict) -> None:
    if not isinstance(volumes, list) or not all(isinstance(item, dict) for item in volumes):
        errors["volumes"] = _("Volumes are a list of {name, mount_path, read_only}.")
        return
    if len(volumes) > MAX_MOUNTS:
        errors["volumes"] = _("At most %(max)d volume mounts.") % {"max": MAX_MOUNTS}
        return
    problems = []
    seen: set[str] = set()
    for item in volumes:
        name, path = item.get("name"), item.get("mount_path")
        if not isinstance(name, str) or not OBJECT_NAME.match(name):
            problems.append(_("'%(name)s' is not a volume name.") % {"name": name})
            continue
        if not isinstance(item.get("read_only", True), bool):
            problems.append(_("read_only of %(name)s must be true or false.") % {"name": name})
        problem = mount_path_problem(path)
        if problem:
            problems.append(problem)
        elif path in seen:
            problems.append(_("%(path)s is mounted twice.") % {"path": path})
        else:
            seen.add(path)
    if problems:
        errors["volumes"] = " ".join(problems)


def _check_shm(spec: JobSpec, errors: dict) -> None:
    if isinstance(spec.shm_gib, bool) or not isinstance(spec.shm_gib, int) or spec.shm_gib < 0:
        errors["shm_gib"] = _("Shared memory is a whole number of GiB (0 for none).")
        return
    if spec.shm_gib > MAX_SHM_GIB:
        errors["shm_gib"] = _("Shared memory can be at most %(max)d GiB.") % {"max": MAX_SHM_GIB}
    elif spec.shm_gib and isinstance(spec.memory_mib, int) and "memory_mib" not in errors:
        # /dev/shm is memory of the container: its pages count against the memory limit, beside the processes'.
        most = (spec.memory_mib - MIN_MEMORY_BESIDE_SHM_MIB) // 1024
        if spec.shm_gib > most:
            errors["shm_gib"] = _(
                "Shared memory is part of the job's memory: with %(memory)d MiB, at most %(most)d GiB of it can be "
                "shared memory (1 GiB stays for the processes). Ask for more memory or less shared memory."
            ) % {"memory": spec.memory_mib, "most": max(most, 0)}


def _check_secret_refs(spec: JobSpec, errors: dict) -> None:
    names = spec.image_pull_secrets
    if not isinstance(names, list) or not all(isinstance(name, str) and OBJECT_NAME.match(name) for name in names):
        errors["image_pull_secrets"] = _("Image pull secrets are a list of secret names.")
    elif len(names) > MAX_PULL_SECRETS:
        errors["image_pull_secrets"] = _("At most %(max)d image pull secrets.") % {"max": MAX_PULL_SECRETS}
    elif len(set(names)) != len(names):
        errors["image_pull_secrets"] = _("An image pull secret is named twice.")
    refs = spec.secret_env
    if not isinstance(refs, dict):
        errors["secret_env"] = _("Environment from secrets maps a variable name to {secret, key}.")
        return
    if len(refs) > MAX_SECRET_ENV:
        errors["secret_env"] = _("At most %(max)d variables from secrets (%(n)d given).") % {
            "max": MAX_SECRET_ENV,
            "n": len(refs),
        }
        return
    problems = []
    for env_name, ref in refs.items():
        if not ENV_NAME.match(str(env_name)):
            problems.append(_("Invalid variable names: %(names)s.") % {"names": env_name})
        elif str(env_name).upper().startswith(RESERVED_ENV_PREFIX):
            problems.append(_("Variables starting with NVIDIA_ are set by the cluster: %(name)s.") % {"name": env_name})
        elif env_name in spec.env:
            problems.append(_("%(name)s is both a plain variable and a variable from a secret.") % {"name": env_name})
        if (
            not isinstance(ref, dict)
            or not isinstance(ref.get("secret"), str)
            or not OBJECT_NAME.match(ref["secret"])
            or not isinstance(ref.get("key"), str)
            or not SECRET_KEY.match(ref["key"])
        ):
            problems.append(_("%(name)s must name a secret and one of its keys.") % {"name": env_name})
    if problems:
        errors["secret_env"] = " ".join(problems)


# A key of a Secret's data (Kubernetes: alphanumerics, '-', '_' or '.', and neither '.' nor starting with '..', which
# covers '..'). The one rule of the keys of team secrets and of the keys jobs' secret_env names.
SECRET_KEY = re.compile(r"^(?!\.\Z)(?!\.\.)[-._a-zA-Z0-9]{1,253}\Z")


def check_team_data(spec: JobSpec, errors: dict) -> None:
    """The shape of the spec's team data on its own; that the volumes and secrets are the team's is checked by
    `teamdata.selectors.check_job_references` at submission."""
    _check_volumes(spec.volumes, errors)
    _check_shm(spec, errors)
    _check_secret_refs(spec, errors)
