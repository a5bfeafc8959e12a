"""The submit form: what a researcher types, turned into a `JobSpec` (validated by `jobs.specs` and the service).

Units are the ones people think in (CPU cores, memory in GiB, a command line and a line of arguments); the spec keeps
millicores, MiB and lists. Errors from the spec and the submission service come back keyed by spec field and are placed
beside the form field they belong to (`SPEC_TO_FORM`).
"""

import shlex
from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.choices import JobMail
from portal.models import Team

from .choices import Placement, Priority
from .specs import (
    DEFAULT_TERMINATION_GRACE_SECONDS,
    MAX_TERMINATION_GRACE_SECONDS,
    JobSpec,
    default_grace_seconds,
    max_grace_seconds,
)

# Spec field (as raised by validate_spec / check_fits_limits / submit_job) -> form field.
SPEC_TO_FORM = {
    "name": "name",
    "image": "image",
    "gpus": "gpus",
    "cpu_millicores": "cpu",
    "memory_mib": "memory_gib",
    "placement": "placement",
    "spill_after_minutes": "spill_after_minutes",
    "priority": "priority",
    "max_run_minutes": "max_run_minutes",
    "termination_grace_seconds": "termination_grace_seconds",
    "command": "command",
    "args": "args",
    "env": "env",
    "pod_annotations": "pod_annotations",
    "team": "team",
    "pool": "pool",
    "volumes": "volumes",
    "shm_gib": "shm_gib",
    "image_pull_secrets": "image_pull_secrets",
    "secret_env": "secret_env",
    "nodes": "nodes",
    "retries": "retries",
    "notify": "notify",
}
MIB_PER_GIB = 1024


def _pairs(text: str, what: str) -> dict[str, str]:
    pairs = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValidationError(
                _("Line %(n)d: write %(what)s as KEY=value."), params={"n": number, "what": what}, code="pairs"
            )
        pairs[key.strip()] = value.strip()
    return pairs


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as error:
        raise ValidationError(_("The command cannot be split: %(why)s."), params={"why": error}) from None


def _pairs_text(values: dict) -> str:
    return "\n".join(f"{key}={value}" for key, value in values.items())


def notify_field() -> forms.MultipleChoiceField:
    """When the submitter is e-mailed about a job (`Job.notify`): none ticked, no mail."""
    return forms.MultipleChoiceField(
        label=_("E-mail me"),
        choices=JobMail.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("About this job, at your account's address. What new jobs ask for is in your preferences."),
    )


class JobNotifyForm(forms.Form):
    """The job page's choice of e-mails, for its submitter while it is not finished (`services.set_job_notify`)."""

    notify = notify_field()

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)

    def clean_notify(self) -> list[str]:
        return JobMail.ordered(self.cleaned_data["notify"])


class JobSubmitForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="slug", label=_("Team"))
    pool = forms.ModelChoiceField(queryset=Pool.objects.none(), to_field_name="slug", label=_("Pool"))
    name = forms.CharField(
        label=_("Name"), max_length=63, help_text=_("Lowercase letters, digits and dashes, e.g. llama-finetune.")
    )
    image = forms.CharField(label=_("Image"), max_length=255, help_text=_("e.g. registry.example.com/team/train:1.0"))
    command = forms.CharField(
        label=_("Command"),
        required=False,
        max_length=4000,
        help_text=_("One line, split like a shell does, e.g. python train.py --epochs 3. Empty: the image's own."),
    )
    args = forms.CharField(
        label=_("Arguments"),
        required=False,
        max_length=4000,
        help_text=_("Optional, split the same way and given after the command (or the image's own), e.g. --epochs 3."),
    )
    gpus = forms.IntegerField(label=_("GPUs per node"), min_value=1, max_value=64, initial=1)
    cpu = forms.DecimalField(
        label=_("CPU (cores)"), min_value=Decimal("0.1"), max_digits=6, decimal_places=1, initial=Decimal("1")
    )
    memory_gib = forms.DecimalField(
        label=_("Memory (GiB)"), min_value=Decimal("0.1"), max_digits=7, decimal_places=1, initial=Decimal("4")
    )
    placement = forms.ChoiceField(
        label=_("Placement"), choices=Placement.choices, initial=Placement.STRICT, widget=forms.RadioSelect
    )
    spill_after_minutes = forms.IntegerField(
        label=_("Spill after (minutes)"), required=False, min_value=1, help_text=_("Only for spill-after placement.")
    )
    priority = forms.TypedChoiceField(
        label=_("Priority"),
        choices=Priority.choices,
        coerce=int,
        initial=Priority.NORMAL,
        help_text=_("High can preempt other work: for team leads, and members of teams a platform admin allows."),
    )
    max_run_minutes = forms.IntegerField(
        label=_("Maximum run time (minutes)"), min_value=1, initial=24 * 60, help_text=_("The job is stopped after it.")
    )
    termination_grace_seconds = forms.IntegerField(
        label=_("Grace period when stopped (seconds)"),
        required=False,
        min_value=0,
        max_value=MAX_TERMINATION_GRACE_SECONDS,
        initial=DEFAULT_TERMINATION_GRACE_SECONDS,
    )
    env = forms.CharField(
        label=_("Environment variables"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("One KEY=value per line. Names starting with NVIDIA_ are set by the cluster."),
    )
    pod_annotations = forms.CharField(
        label=_("Pod annotations"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("One key=value per line."),
    )
    volumes = forms.CharField(
        label=_("Volumes"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            "One volume of the team per line: name:/mount/path, read-only; add :rw to write, e.g. "
            "checkpoints:/workspace/ckpt:rw."
        ),
    )
    shm_gib = forms.IntegerField(
        label=_("Shared memory /dev/shm (GiB)"),
        required=False,
        min_value=0,
        max_value=1024,
        initial=0,
        help_text=_("For data loaders; part of the job's memory. 0: the runtime's small default."),
    )
    image_pull_secrets = forms.CharField(
        label=_("Image pull secrets"),
        required=False,
        max_length=1000,
        help_text=_("Names of the team's image pull credentials, separated by commas."),
    )
    secret_env = forms.CharField(
        label=_("Environment from secrets"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_(
            "One NAME=secret/key per line: the variable gets that key of the team's secret, e.g. HF_TOKEN=hf/token."
        ),
    )
    nodes = forms.IntegerField(
        label=_("Nodes"),
        required=False,
        min_value=1,
        max_value=64,
        initial=1,
        help_text=_(
            "Above 1: a multi-node job, one pod of the GPUs above on each node, started all together or not at all; "
            "it uses nodes × GPUs of the quota. Each pod gets MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, "
            "NPROC_PER_NODE and WORLD_SIZE (what torchrun reads)."
        ),
    )
    retries = forms.IntegerField(
        label=_("Retries"),
        required=False,
        min_value=0,
        max_value=10,
        initial=0,
        help_text=_("Failed pods replaced before the job fails; 0: a failed pod fails the job."),
    )
    notify = notify_field()
    save_as_template = forms.CharField(
        label=_("Save as template named"),
        required=False,
        max_length=80,
        help_text=_("Optional: reuse this spec later from the template list."),
    )

    def __init__(self, *args, user, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.visible_to(user).order_by("name")
        self.fields["pool"].queryset = Pool.objects.visible_to(user).order_by("name")
        self._cap_grace_period()
        self.fields["notify"].initial = list(user.notify_default)
        allowed = settings.POD_ANNOTATION_ALLOWLIST
        self.fields["pod_annotations"].help_text = (
            _("One key=value per line. Allowed keys: %(keys)s.") % {"keys": ", ".join(allowed)}
            if allowed
            else _("This portal allows no pod annotations.")
        )

    def _cap_grace_period(self) -> None:
        """The platform's cap on grace periods, read when the form is made (a setting; see jobs.specs)."""
        field, cap = self.fields["termination_grace_seconds"], max_grace_seconds()
        field.max_value = cap
        field.validators = [v for v in field.validators if not isinstance(v, MaxValueValidator)]
        field.validators.append(MaxValueValidator(cap))
        field.widget.attrs["max"] = cap
        field.initial = default_grace_seconds()
        field.help_text = _(
            "Time the job has to checkpoint between the stop signal and the kill, when it is preempted (e.g. its "
            "borrowed GPUs are reclaimed), cancelled or out of time. At most %(cap)d s on this portal."
        ) % {"cap": cap}

    def clean_command(self) -> list[str]:
        return _split(self.cleaned_data["command"])

    def clean_args(self) -> list[str]:
        return _split(self.cleaned_data["args"])

    def clean_env(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["env"], _("variables"))

    def clean_pod_annotations(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["pod_annotations"], _("annotations"))

    def clean_volumes(self) -> list[dict]:
        mounts = []
        for number, line in enumerate(self.cleaned_data["volumes"].splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, rest = line.partition(":")
            path, mode = rest, "ro"
            if rest.endswith((":rw", ":ro")):
                path, mode = rest[:-3], rest[-2:]
            if not sep or not name.strip() or not path.strip():
                raise ValidationError(
                    _("Line %(n)d: write a volume as name:/mount/path, with :rw to write."), params={"n": number}
                )
            mounts.append({"name": name.strip(), "mount_path": path.strip(), "read_only": mode == "ro"})
        return mounts

    def clean_shm_gib(self) -> int:
        return self.cleaned_data["shm_gib"] or 0

    def clean_image_pull_secrets(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["image_pull_secrets"].split(",") if name.strip()]

    def clean_secret_env(self) -> dict[str, dict]:
        refs = {}
        for name, ref in _pairs(self.cleaned_data["secret_env"], _("variables")).items():
            secret, slash, key = ref.partition("/")
            if not slash or not secret or not key:
                raise ValidationError(_("Write %(name)s=secret/key."), params={"name": name})
            refs[name] = {"secret": secret.strip(), "key": key.strip()}
        return refs

    def clean_notify(self) -> list[str]:
        return JobMail.ordered(self.cleaned_data["notify"])

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("placement") == Placement.SPILL_AFTER and not cleaned.get("spill_after_minutes"):
            self.add_error("spill_after_minutes", _("Say after how many minutes the job may spill."))
        return cleaned

    def spec(self) -> JobSpec:
        """The spec of a valid form."""
        data = self.cleaned_data
        return JobSpec(
            name=data["name"],
            image=data["image"].strip(),
            gpus=data["gpus"],
            command=data["command"],
            args=data["args"],
            env=data["env"],
            cpu_millicores=int(data["cpu"] * 1000),
            memory_mib=int(data["memory_gib"] * MIB_PER_GIB),
            placement=data["placement"],
            spill_after_minutes=data["spill_after_minutes"] if data["placement"] == Placement.SPILL_AFTER else None,
            priority=data["priority"],
            max_run_minutes=data["max_run_minutes"],
            termination_grace_seconds=(
                default_grace_seconds()
                if data["termination_grace_seconds"] is None
                else data["termination_grace_seconds"]
            ),
            pod_annotations=data["pod_annotations"],
            volumes=data["volumes"],
            shm_gib=data["shm_gib"],
            image_pull_secrets=data["image_pull_secrets"],
            secret_env=data["secret_env"],
            nodes=data["nodes"] or 1,
            retries=data["retries"] or 0,
        )

    def add_spec_errors(self, error: ValidationError) -> None:
        """Place the errors of validate_spec / submit_job beside their fields (the rest above the form)."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for key, messages in error.message_dict.items():
            field = SPEC_TO_FORM.get(key)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)

    @staticmethod
    def initial_from(*, spec: dict, team: Team | None, pool: Pool | None) -> dict:
        """Form values from a saved template (or a job's spec), in the form's units."""
        initial = {
            "name": spec.get("name", ""),
            "image": spec.get("image", ""),
            # Apart, as the spec keeps them: arguments without a command go to the image's own command.
            "command": shlex.join(spec.get("command", [])),
            "args": shlex.join(spec.get("args", [])),
            "gpus": spec.get("gpus", 1),
            "cpu": Decimal(spec.get("cpu_millicores", 1000)) / 1000,
            "memory_gib": Decimal(spec.get("memory_mib", 4096)) / MIB_PER_GIB,
            "placement": spec.get("placement", Placement.STRICT),
            "spill_after_minutes": spec.get("spill_after_minutes"),
            "priority": spec.get("priority", Priority.NORMAL),
            "max_run_minutes": spec.get("max_run_minutes", 24 * 60),
            "termination_grace_seconds": spec.get("termination_grace_seconds", default_grace_seconds()),
            "env": _pairs_text(spec.get("env", {})),
            "pod_annotations": _pairs_text(spec.get("pod_annotations", {})),
            "volumes": "\n".join(
                f"{item['name']}:{item['mount_path']}{'' if item.get('read_only', True) else ':rw'}"
                for item in spec.get("volumes", [])
            ),
            "shm_gib": spec.get("shm_gib", 0),
            "image_pull_secrets": ", ".join(spec.get("image_pull_secrets", [])),
            "secret_env": "\n".join(
                f"{name}={ref['secret']}/{ref['key']}" for name, ref in spec.get("secret_env", {}).items()
            ),
            "nodes": spec.get("nodes", 1),
            "retries": spec.get("retries", 0),
        }
        if team is not None:
            initial["team"] = team.slug
        if pool is not None:
            initial["pool"] = pool.slug
        return initial
