from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from pools.api.serializers import PoolSlugField
from pools.models import Pool
from portal.api.base import WholeNumberField
from portal.api.serializers import TeamSlugField
from portal.choices import JobMail
from portal.models import Team

from ..choices import Placement, Priority
from ..models import Job, JobEvent
from ..reasons import borrowed_note
from ..specs import (
    MAX_GPUS_PER_JOB,
    MAX_NODES_PER_JOB,
    MAX_PULL_SECRETS,
    MAX_RETRIES,
    MAX_TERMINATION_GRACE_SECONDS,
    JobSpec,
    default_grace_seconds,
    max_grace_seconds,
)


def _grace_field(maximum: int) -> WholeNumberField:
    return WholeNumberField(
        label_text=str(_("Grace period")),
        required=False,
        min_value=0,
        max_value=maximum,
        help_text=_(
            "Seconds a stopped pod (preempted, cancelled or out of time) has to checkpoint before it is killed "
            "(default 30), at most the platform's cap (RESERVOIR_MAX_GRACE_SECONDS, 60 unless set otherwise)."
        ),
    )


def _notify_field(**kwargs) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(
            choices=JobMail.choices,
            error_messages={"invalid_choice": _('"{input}" is not one of start, end, fail.')},
        ),
        help_text=_(
            "When the submitter is e-mailed about the job: any of start (it starts running), end (it succeeds) and "
            "fail (it fails), one mail each; [] for none."
        ),
        **kwargs,
    )


class JobNotifySerializer(serializers.Serializer):
    """What may be changed on a job once submitted: its e-mails (by its submitter, while it is not finished)."""

    notify = _notify_field()

    def validate(self, attrs):
        others = sorted(set(self.initial_data) - {"notify"}) if isinstance(self.initial_data, dict) else []
        if others:
            raise serializers.ValidationError({name: _("Only notify can be changed on a job.") for name in others})
        return attrs


class ExpectedStartSerializer(serializers.Serializer):
    """A job's start-time quote (jobs/quote.py): when it is likely to start Running, with an 80-percent interval."""

    starts_now = serializers.BooleanField(help_text=_("It fits at once (or Kueue has admitted it already)."))
    estimate = serializers.DateTimeField(
        allow_null=True,
        help_text=_(
            "The likely start; null when it cannot start with its team's quota, waits for a node or for GPUs other "
            "teams borrow."
        ),
    )
    low = serializers.DateTimeField(
        allow_null=True, help_text=_("Where the interval holding the start with 80 percent likelihood begins.")
    )
    high = serializers.DateTimeField(allow_null=True, help_text=_("Where that interval ends."))
    waits_for_node = serializers.BooleanField(
        source="unplaced",
        help_text=_(
            "Kueue has admitted it but the scheduler finds no node for its pods: no time is quoted (see basis)."
        ),
    )
    waits_for_other_teams = serializers.BooleanField(
        source="waits_for_others",
        help_text=_(
            "It (or a job ahead of it) waits for GPUs other teams borrow in the pool's cohort: no time is quoted."
        ),
    )
    text = serializers.CharField(help_text=_("The quote in the reader's language."))
    basis = serializers.CharField(help_text=_("What the quote rests on, in the reader's language."))


class JobSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    admitted_pool = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text=_("The pool Kueue admitted the job in (its flavor); null while queued."),
    )
    borrowed_gpus = serializers.SerializerMethodField(
        help_text=_(
            "GPUs the job holds above its team's reservation, borrowed in the pool's cohort: Kueue may preempt the "
            "job when the owner needs them back. 0 when it holds none."
        )
    )
    borrowed_note = serializers.SerializerMethodField(
        help_text=_("In the reader's language, what `borrowed_gpus` means for the job; empty when it borrows none.")
    )

    expected_start = serializers.SerializerMethodField(
        help_text=_("When the job is likely to start Running; null once it runs or is final.")
    )
    notify = _notify_field(read_only=True)

    @extend_schema_field(ExpectedStartSerializer(allow_null=True))
    def get_expected_start(self, job):
        quote = self.context.get("quotes", {}).get(job.pk)
        return None if quote is None else ExpectedStartSerializer(quote).data

    def get_borrowed_gpus(self, job) -> int:
        return self.context.get("borrowed_gpus", {}).get(job.pk, 0)

    def get_borrowed_note(self, job) -> str:
        return borrowed_note(self.get_borrowed_gpus(job))

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "team",
            "pool",
            "submitted_by",
            "image",
            "gpus",
            "cpu_millicores",
            "memory_mib",
            "placement",
            "priority",
            "state",
            "state_changed_at",
            "created_at",
            "started_at",
            "finished_at",
            "node_name",
            "pending_reason",
            "admitted_pool",
            "preemptions",
            "nodes",
            "total_gpus",
            "borrowed_gpus",
            "borrowed_note",
            "expected_start",
            "notify",
        ]
        read_only_fields = fields


# The list's rows (GET /api/v1/jobs/): JobSerializer's fields, read with values_list() (related rows by their slug or
# username) and written as plain dicts. Fifty rows through DRF's fields cost more CPU than all the rest of a request;
# these rows are the same JSON, field for field (tests/jobs/test_api_list_rows.py holds them to JobSerializer's).
_RELATED_COLUMNS = {
    "team": "team__slug",
    "pool": "pool__slug",
    "submitted_by": "submitted_by__username",
    "admitted_pool": "admitted_pool__slug",
}
_COMPUTED_FIELDS = ("borrowed_gpus", "borrowed_note", "expected_start")
_DATETIME_FIELDS = ("state_changed_at", "created_at", "started_at", "finished_at")
# The columns read, in JobSerializer's order; the computed fields are written in their place, between two columns.
_LIST_COLUMNS = [_RELATED_COLUMNS.get(name, name) for name in JobSerializer.Meta.fields if name not in _COMPUTED_FIELDS]
_FIELD_NAMES = tuple(JobSerializer.Meta.fields)
_COMPUTED_AT = _FIELD_NAMES.index(_COMPUTED_FIELDS[0])
if _FIELD_NAMES[_COMPUTED_AT : _COMPUTED_AT + len(_COMPUTED_FIELDS)] != _COMPUTED_FIELDS:
    raise RuntimeError("JobSerializer's computed fields must follow each other, in _COMPUTED_FIELDS's order")
_DATETIME_INDEXES = tuple(_LIST_COLUMNS.index(name) for name in _DATETIME_FIELDS)
# Where a row of `job_list_values` holds the job's id and its state.
LIST_ID = _LIST_COLUMNS.index("id")
LIST_STATE = _LIST_COLUMNS.index("state")


def job_list_values(queryset):
    """`queryset`'s jobs as the values_list() rows `job_list_rows` writes."""
    return queryset.values_list(*_LIST_COLUMNS)


def job_list_rows(values_rows, borrowed_gpus: dict[int, int], quotes: dict | None = None) -> list[dict]:
    """`job_list_values` rows as JobSerializer writes their jobs, the borrowed GPUs taken from `borrowed_gpus` and
    the start-time quotes of the jobs not running yet from `quotes` (job id → QuoteWords).

    Each row is one list of its values, the datetimes written as text and the computed fields put in their place, made
    into a dict in one step: per row and field, the least Python a page of fifty asks for (issue 30)."""
    quotes = quotes or {}
    zone = timezone.get_current_timezone()
    notes: dict[int, str] = {}
    rows = []
    for values in values_rows:
        row = list(values)
        for index in _DATETIME_INDEXES:
            moment = row[index]
            if moment is not None:
                text = moment.astimezone(zone).isoformat()
                row[index] = text[:-6] + "Z" if text.endswith("+00:00") else text
        job_id = row[LIST_ID]
        gpus = borrowed_gpus.get(job_id, 0)
        note = notes.get(gpus)
        if note is None:
            note = notes[gpus] = borrowed_note(gpus)
        quote = quotes.get(job_id)
        row[_COMPUTED_AT:_COMPUTED_AT] = (gpus, note, None if quote is None else ExpectedStartSerializer(quote).data)
        rows.append(dict(zip(_FIELD_NAMES, row, strict=True)))
    return rows


class JobPodSerializer(serializers.Serializer):
    """One pod of a job as the cluster sync last saw it (a multi-node job's `completion_index` is its node rank)."""

    completion_index = serializers.IntegerField(allow_null=True)
    name = serializers.CharField()
    node_name = serializers.CharField(help_text=_("Empty while the pod is not placed."))
    phase = serializers.CharField()
    bound_at = serializers.DateTimeField(allow_null=True, help_text=_("When it was bound to its node."))
    finished_at = serializers.DateTimeField(allow_null=True)
    restarts = serializers.IntegerField()


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    message = serializers.CharField(source="in_words", read_only=True, help_text=_("In the reader's language."))

    class Meta:
        model = JobEvent
        fields = ["at", "from_state", "to_state", "message", "actor"]


class JobDetailSerializer(JobSerializer):
    queue_position = serializers.IntegerField(
        read_only=True, allow_null=True, help_text=_("1 = next to be admitted; null unless queued.")
    )
    events = JobEventSerializer(many=True, read_only=True)
    pods_running = serializers.IntegerField(
        read_only=True, help_text=_("Pods running now, of `nodes` (a multi-node job runs once all of them do).")
    )
    pods = JobPodSerializer(
        source="pod_rows", many=True, read_only=True, help_text=_("The job's pods, by completion index.")
    )

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "command",
            "args",
            "env",
            "spill_after_minutes",
            "max_run_minutes",
            "termination_grace_seconds",
            "anti_affinity_group",
            "pod_annotations",
            "spilled",
            "last_error",
            "resubmitted_from",
            "queue_position",
            "events",
            "volumes",
            "shm_gib",
            "image_pull_secrets",
            "secret_env",
            "retries",
            "pods_running",
            "pods",
        ]
        read_only_fields = fields


class JobSubmitSerializer(serializers.Serializer):
    """What a job asks for. The same rules as the submit page apply (jobs.specs.validate_spec, then the team's
    quota and namespace limits in jobs.services.submit_job)."""

    team = TeamSlugField(queryset=Team.objects.none())
    pool = PoolSlugField(queryset=Pool.objects.none())
    name = serializers.CharField(max_length=63)
    image = serializers.CharField(
        max_length=255, help_text=_("OCI reference, e.g. registry.example.com/team/train:1.0")
    )
    gpus = WholeNumberField(label_text=str(_("GPUs")), min_value=1, max_value=MAX_GPUS_PER_JOB)
    # What the container runs is stored as sent: an argument's whitespace ("\t", " part ") is part of it.
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=4096, trim_whitespace=False),
        required=False,
        help_text=_("Each element as sent, whitespace included. Empty: the image's own command."),
    )
    args = serializers.ListField(
        child=serializers.CharField(allow_blank=True, max_length=4096, trim_whitespace=False),
        required=False,
        help_text=_("Each element as sent, whitespace included."),
    )
    # Values are trimmed as the submit page trims its KEY=value lines, so that a job copied in the form ("Edit a copy",
    # a template) keeps the same values.
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=4096, trim_whitespace=True),
        required=False,
        help_text=_("Values without their surrounding whitespace, as on the submit page."),
    )
    cpu_millicores = WholeNumberField(label_text=str(_("CPU")), required=False, max_value=512_000)
    memory_mib = WholeNumberField(label_text=str(_("Memory")), required=False, max_value=4 * 1024 * 1024)
    placement = serializers.ChoiceField(choices=Placement.choices, required=False)
    spill_after_minutes = WholeNumberField(
        label_text=str(_("Spill after")), required=False, allow_null=True, max_value=7 * 24 * 60
    )
    priority = serializers.ChoiceField(choices=Priority.choices, required=False)
    max_run_minutes = WholeNumberField(label_text=str(_("Run time")), required=False, max_value=30 * 24 * 60)
    termination_grace_seconds = _grace_field(MAX_TERMINATION_GRACE_SECONDS)  # capped per request, see get_fields
    anti_affinity_group = serializers.CharField(max_length=63, required=False, allow_blank=True)
    pod_annotations = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=4096, trim_whitespace=True),
        required=False,
        help_text=_("Values without their surrounding whitespace, as on the submit page."),
    )
    nodes = WholeNumberField(
        label_text=str(_("Nodes")),
        required=False,
        min_value=1,
        max_value=MAX_NODES_PER_JOB,
        help_text=_("Pods, one per node, each with `gpus` GPUs (default 1); the job uses nodes × gpus GPUs."),
    )
    retries = WholeNumberField(
        label_text=str(_("Retries")),
        required=False,
        min_value=0,
        max_value=MAX_RETRIES,
        help_text=_("Failed pods replaced before the job fails (default 0: a failed pod fails the job)."),
    )

    volumes = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        max_length=16,
        help_text=_('Team volumes to mount: [{"name": "datasets", "mount_path": "/data", "read_only": true}].'),
    )
    shm_gib = WholeNumberField(label_text=str(_("Shared memory")), required=False, max_value=1024)
    image_pull_secrets = serializers.ListField(
        child=serializers.CharField(max_length=63),
        required=False,
        max_length=MAX_PULL_SECRETS,
        help_text=_("Names of the team's image pull credentials."),
    )
    notify = _notify_field(required=False)
    secret_env = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField(max_length=253)),
        required=False,
        help_text=_(
            "Environment from the team's named secrets (image pull credentials are only for image_pull_secrets): "
            '{"HF_TOKEN": {"secret": "hf", "key": "token"}}.'
        ),
    )

    def get_fields(self):
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            # An invisible team or pool is "unknown", exactly like one that does not exist.
            fields["team"].queryset = Team.objects.visible_to(request.user)
            fields["pool"].queryset = Pool.objects.visible_to(request.user)
        fields["termination_grace_seconds"] = _grace_field(max_grace_seconds())
        return fields

    def spec(self) -> JobSpec:
        data = {k: v for k, v in self.validated_data.items() if k not in ("team", "pool", "notify")}
        data.setdefault("termination_grace_seconds", default_grace_seconds())
        return JobSpec(**data)
