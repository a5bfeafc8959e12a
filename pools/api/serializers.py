from django.db import models
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.base import FullCleanMixin, GpuField, WholeNumberField, refuse_fixed_fields
from portal.api.serializers import TeamSlugField
from portal.models import Team

from .. import projection
from ..choices import Lending
from ..models import NamespaceLimits, Node, Pool, Quota, QuotaRequest, Reservation
from ..occupancy import JOB_SIZES


class PoolSlugField(serializers.SlugRelatedField):
    default_error_messages = {"does_not_exist": _("Unknown pool '{value}'.")}

    def __init__(self, **kwargs):
        super().__init__(slug_field="slug", **kwargs)


class PoolSerializer(FullCleanMixin, serializers.ModelSerializer):
    spill_pools = PoolSlugField(many=True, queryset=Pool.objects.all(), required=False)
    contracted_gpus = GpuField(allow_null=True, required=False)
    min_nodes = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    max_nodes = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    gpus_per_node = serializers.IntegerField(
        min_value=0,
        max_value=1024,
        required=False,
        allow_null=True,
        help_text=_(
            "Elastic and shared pools: GPUs of one node (Kueue admits up to max_nodes × this). "
            "Null: the largest node of the pool seen in the cluster."
        ),
    )

    class Meta:
        model = Pool
        fields = [
            "id",
            "slug",
            "name",
            "kind",
            "gpu_model",
            "node_selector",
            "taints",
            "apply_taints",
            "contracted_gpus",
            "monthly_price_per_gpu",
            "hourly_price_per_gpu",
            "lending_price_share",
            "min_nodes",
            "max_nodes",
            "gpus_per_node",
            "spill_pools",
        ]
        read_only_fields = ["id"]
        extra_kwargs = {
            "monthly_price_per_gpu": {"min_value": 0},
            "hourly_price_per_gpu": {"min_value": 0},
            "lending_price_share": {"min_value": 0, "max_value": 1},
        }


class NodeSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = Node
        fields = [
            "name",
            "pool",
            "labels",
            "taints",
            "missing_taints",
            "gpu_capacity",
            "gpu_allocatable",
            "ready",
            "unschedulable",
            "last_seen_at",
        ]


class GangFitSerializer(serializers.Serializer):
    """Whether a multi-node job (one pod of `gpus` GPUs on each of `nodes` nodes) fits the pool now."""

    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    nodes_with_room = serializers.IntegerField(help_text="nodes with at least `gpus` free GPUs")
    fits = serializers.BooleanField()


class OccupancySerializer(serializers.Serializer):
    """GPUs of one pool right now, from synced nodes and pods; `fits` and `stranded` are keyed by job size."""

    pool = serializers.CharField()
    contracted_gpus = serializers.IntegerField(allow_null=True)
    live_gpus = serializers.IntegerField(help_text=_("Σ allocatable GPUs over Ready nodes"))
    allocated = serializers.IntegerField(help_text=_("GPUs of pods bound to Ready nodes"))
    held_not_ready = serializers.IntegerField(help_text=_("GPUs of pods still bound to NotReady nodes"))
    free = serializers.IntegerField()
    nodes_ready = serializers.IntegerField()
    nodes_not_ready = serializers.IntegerField()
    largest_free_block = serializers.IntegerField()
    fits = serializers.DictField(child=serializers.IntegerField(), help_text=f"jobs of {JOB_SIZES} GPUs that fit now")
    stranded = serializers.DictField(
        child=serializers.IntegerField(), help_text=_("free GPUs a job of that size can't use")
    )
    nodes_with_free = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="nodes with at least that many free GPUs: the largest N for which N nodes × that size fits now",
    )
    gang = GangFitSerializer(required=False, help_text="with ?nodes=N&gpus=G: whether N nodes × G GPUs fits now")


class NamespaceStateSerializer(serializers.Serializer):
    """Whether the team namespace's ResourceQuota and LimitRange in the cluster match the portal yet."""

    applied = serializers.BooleanField(help_text=_("true once the cluster holds the latest change"))
    desired_version = serializers.IntegerField()
    applied_version = serializers.IntegerField()
    applied_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)


class KueueStateSerializer(serializers.Serializer):
    """Whether Kueue's objects in the cluster (flavors, cluster queues, local queues) match the portal yet."""

    applied = serializers.BooleanField(
        help_text=_("true once Kueue holds the latest change (and every reservation that started or ended since)")
    )
    desired_version = serializers.IntegerField()
    applied_version = serializers.IntegerField()
    applied_at = serializers.DateTimeField(allow_null=True)
    last_checked_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)


class ReservationSerializer(serializers.ModelSerializer):
    team = TeamSlugField(queryset=Reservation._meta.get_field("team").related_model.objects.all())
    pool = PoolSlugField(queryset=Pool.objects.all())
    gpus = GpuField(min_value=1)
    monthly_price_per_gpu = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=0,
        required=False,
        help_text=_("Default: the pool's monthly price per GPU."),
    )
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    lendable_gpus = serializers.IntegerField(
        read_only=True, help_text=_("GPUs of the reservation other teams may borrow while the team leaves them idle.")
    )

    class Meta:
        model = Reservation
        fields = [
            "id",
            "team",
            "pool",
            "gpus",
            "starts_at",
            "ends_at",
            "monthly_price_per_gpu",
            "created_by",
            "created_at",
            "lending",
            "protected_gpus",
            "lendable_gpus",
        ]
        read_only_fields = ["id", "created_by", "created_at", "lending", "protected_gpus", "lendable_gpus"]


class ReservationLendingSerializer(serializers.Serializer):
    lending = serializers.ChoiceField(
        choices=Lending.choices,
        help_text=_(
            "none: lend nothing; idle: lend the GPUs the team leaves idle; protect: the same, but never the "
            "protected_gpus."
        ),
    )
    protected_gpus = WholeNumberField(
        label_text=str(_("Protected GPUs")),
        required=False,
        min_value=0,
        help_text=_("With lending protect: GPUs never lent (1 to the reservation's GPUs)."),
    )


class ReservationEndSerializer(serializers.Serializer):
    """PATCH of a reservation (a contract): only its end moves. A body that names another team, pool, GPU count,
    start or price, or another lending setting, is refused; the stored values, as a GET answered them, are accepted."""

    ends_at = serializers.DateTimeField()

    def validate(self, attrs):
        contract = _(
            "A reservation is a contract: only ends_at can be changed. For other GPUs, another start or price, end "
            "it and make a new reservation."
        )
        lent = _("What a reservation lends is changed with POST /api/v1/reservations/{id}/lending/.")
        messages = dict.fromkeys(("team", "pool", "gpus", "starts_at", "monthly_price_per_gpu"), contract)
        messages.update(lending=lent, protected_gpus=lent)
        refuse_fixed_fields(
            data=self.initial_data, instance=self.instance, messages=messages, serializer_class=ReservationSerializer
        )
        return attrs


class QuotaSerializer(serializers.ModelSerializer):
    team = TeamSlugField(queryset=Quota._meta.get_field("team").related_model.objects.all())
    pool = PoolSlugField(queryset=Pool.objects.all())
    max_gpus = GpuField(help_text=_("GPUs of the pool the team may use at once."))
    gpus_in_use = serializers.IntegerField(read_only=True, help_text=_("GPUs its admitted jobs hold now."))
    namespace = serializers.SerializerMethodField()
    kueue = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = ["id", "team", "pool", "max_gpus", "gpus_in_use", "updated_at", "namespace", "kueue"]
        read_only_fields = ["id", "updated_at"]
        validators = []  # (team, pool) is an upsert key here: set_quota creates or updates

    @extend_schema_field(NamespaceStateSerializer)
    def get_namespace(self, quota) -> dict:
        # A quota `set_quota` changed carries the state its change left (`changed_namespace_state`): not read again.
        return getattr(quota, "changed_namespace_state", None) or projection.namespace_state(quota.team_id)

    @extend_schema_field(KueueStateSerializer)
    def get_kueue(self, quota) -> dict:
        # One projection for all teams: read once per answer.
        if "kueue_state" not in self.context:
            self.context["kueue_state"] = projection.kueue_state()
        return self.context["kueue_state"]


class QuotaChangeSerializer(serializers.Serializer):
    """PUT/PATCH of a quota: only its GPUs change. A body that names another team or pool is refused (that is another
    quota: POST it); the stored ones, as a GET answered them, are accepted."""

    max_gpus = GpuField(help_text=_("GPUs of the pool the team may use at once."))

    def validate(self, attrs):
        message = _("A quota is of one team in one pool: only max_gpus can be changed. POST the other team's quota.")
        refuse_fixed_fields(
            data=self.initial_data,
            instance=self.instance,
            messages={"team": message, "pool": message},
            serializer_class=QuotaSerializer,
        )
        return attrs


LIMIT_FIELDS = [f.name for f in NamespaceLimits._meta.concrete_fields if isinstance(f, models.PositiveIntegerField)]


class NamespaceLimitsSerializer(FullCleanMixin, serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = serializers.SerializerMethodField()

    full_clean_exclude = ("team",)

    class Meta:
        model = NamespaceLimits
        exclude = ["id"]
        read_only_fields = ["updated_at"]
        extra_kwargs = {
            **{name: {"min_value": 0, "max_value": 100_000_000} for name in LIMIT_FIELDS},
            # A team on the defaults has no row of its own: its limits were never updated.
            "updated_at": {"allow_null": True},
        }

    @extend_schema_field(NamespaceStateSerializer)
    def get_namespace(self, limits) -> dict:
        return projection.namespace_state(limits.team_id)


class QuotaRequestSerializer(serializers.ModelSerializer):
    """A lead's request to change a team's quota in a pool, and what became of it."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "team",
            "pool",
            "previous_max_gpus",
            "max_gpus",
            "reason",
            "state",
            "requested_by",
            "created_at",
            "decided_by",
            "decided_at",
            "decision_note",
        ]
        read_only_fields = fields


class QuotaRequestCreateSerializer(serializers.Serializer):
    """What a lead asks for. The team is one the caller can see (any other is "unknown")."""

    team = TeamSlugField(queryset=Team.objects.none())
    pool = PoolSlugField(queryset=Pool.objects.none())
    max_gpus = GpuField(help_text=_("The quota asked for: GPUs of the pool the team may use at once."))
    reason = serializers.CharField(max_length=2000, help_text=_("Why the team needs the change."))

    def get_fields(self):
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["team"].queryset = Team.objects.visible_to(request.user)
            fields["pool"].queryset = Pool.objects.visible_to(request.user)
        return fields


class QuotaRequestDecisionSerializer(serializers.Serializer):
    note = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, default="", help_text=_("Why, for the team lead.")
    )
