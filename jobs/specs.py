"""What a user asks for when submitting a job, validated in one place for the form, the API and resubmission."""

import re
from dataclasses import asdict, dataclass, field

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from .choices import Placement, Priority

# An OCI image reference: [registry[:port]/]path[:tag][@digest], lowercase path components.
IMAGE_REFERENCE = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9.-]+(?::[0-9]+)?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}))?$"
)
JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ANNOTATION_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_GPUS_PER_JOB = 64


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

    def as_model_fields(self) -> dict:
        return asdict(self)

    @classmethod
    def from_job(cls, job) -> "JobSpec":
        return cls(**{name: getattr(job, name) for name in cls.__dataclass_fields__})


def _whole(value, name: str, errors: dict, *, minimum: int, maximum: int | None = None, label: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name] = _("%(label)s must be a whole number.") % {"label": label}
    elif value < minimum:
        errors[name] = _("%(label)s must be at least %(min)d.") % {"label": label, "min": minimum}
    elif maximum is not None and value > maximum:
        errors[name] = _("%(label)s can be at most %(max)d.") % {"label": label, "max": maximum}


def validate_spec(spec: JobSpec) -> None:
    """Check the spec on its own (team and pool limits are checked by the submission service)."""
    errors: dict[str, str] = {}
    if not JOB_NAME.match(spec.name or ""):
        errors["name"] = _("Use up to 63 lowercase letters, digits and dashes, starting and ending with one.")
    if not spec.image or not IMAGE_REFERENCE.match(spec.image) or len(spec.image) > 255:
        errors["image"] = _("'%(image)s' is not an image reference like registry.example.com/team/train:1.0.") % {
            "image": spec.image
        }
    _whole(spec.gpus, "gpus", errors, minimum=1, maximum=MAX_GPUS_PER_JOB, label=_("GPUs"))
    _whole(spec.cpu_millicores, "cpu_millicores", errors, minimum=100, maximum=512_000, label=_("CPU"))
    _whole(spec.memory_mib, "memory_mib", errors, minimum=64, maximum=4 * 1024 * 1024, label=_("Memory"))
    _whole(spec.max_run_minutes, "max_run_minutes", errors, minimum=1, maximum=30 * 24 * 60, label=_("Run time"))
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
    if bad_env:
        errors["env"] = _("Invalid variable names: %(names)s.") % {"names": ", ".join(bad_env)}
    if spec.anti_affinity_group and not JOB_NAME.match(spec.anti_affinity_group):
        errors["anti_affinity_group"] = _("Use lowercase letters, digits and dashes.")
    bad_annotations = [key for key in spec.pod_annotations if not ANNOTATION_KEY.match(str(key))]
    if bad_annotations:
        errors["pod_annotations"] = _("Invalid annotation keys: %(keys)s.") % {"keys": ", ".join(bad_annotations)}
    if errors:
        raise ValidationError(errors)
