"""Pools of GPU nodes, the nodes themselves, reservations and quotas.

A pool is a set of Kubernetes nodes chosen by labels and kept apart by taints (seed 003). A reserved pool has a
contracted GPU count the company pays for each month (seed 000); reservations hand those GPUs to teams for a
period and never add up to more than the contract at any moment (enforced by `pools.services`, under a row lock
on the pool). Quotas cap how many GPUs a team may use at once in a pool, and the team namespace's limits.
How a reservation's lending and a reserved pool's contract changed over time is kept apart (`changes`).
"""

from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils.formats import date_format
from django.utils.translation import gettext_lazy as _

from portal.models import SLUG_VALIDATOR, Team, TeamScopedQuerySet

from ..choices import QUOTA_REQUEST_TRANSITIONS, Lending, PoolKind, QuotaRequestState, lendable_gpus
from .changes import ContractChange, LendingChange, PriceChange  # noqa: F401 (models of the app, defined apart)
from .labels import validate_selector, validate_taints  # noqa: F401 (the fields' validators; migrations name them here)

GPU_RESOURCE = "nvidia.com/gpu"
MAX_RESERVATION_YEARS = 10
MAX_RESERVATION = timedelta(days=MAX_RESERVATION_YEARS * 366)


def lending_price(hourly_price: Decimal, share: Decimal) -> Decimal:
    """What a lender is credited per GPU-hour lent: the hourly price × the lending share, to four places (half up) —
    the unit price of its credit line."""
    return (hourly_price * share).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)


ZERO = Decimal("0")
DEFAULT_LENDING_PRICE_SHARE = Decimal("0.5")


class PoolQuerySet(models.QuerySet):
    def visible_to(self, user) -> "PoolQuerySet":
        """Every signed-in user sees every pool's occupancy (PRODUCT.md, roles)."""
        return self.all() if user.is_authenticated else self.none()


class Pool(models.Model):
    """A named set of GPU nodes, selected by labels and isolated by taints, with its prices and bounds."""

    slug = models.SlugField(_("slug"), max_length=40, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(_("name"), max_length=100)
    kind = models.CharField(_("kind"), max_length=20, choices=PoolKind.choices)
    gpu_model = models.CharField(_("GPU model"), max_length=60, help_text=_("e.g. NVIDIA-A100-SXM4-80GB"))
    node_selector = models.JSONField(
        _("node selector"), default=dict, validators=[validate_selector], help_text=_('e.g. {"node-role": "training"}')
    )
    taints = models.JSONField(
        _("taints"),
        default=list,
        blank=True,
        validators=[validate_taints],
        help_text=_('e.g. [{"key": "workload", "value": "training", "effect": "NoSchedule"}]'),
    )
    apply_taints = models.BooleanField(
        _("apply missing taints"), default=False, help_text=_("Taint pool nodes that lack the pool's taints.")
    )
    contracted_gpus = models.PositiveIntegerField(
        _("contracted GPUs"), null=True, blank=True, help_text=_("Reserved pools: the GPUs paid for each month.")
    )
    monthly_price_per_gpu = models.DecimalField(
        _("monthly price per GPU"), max_digits=12, decimal_places=2, default=ZERO, validators=[MinValueValidator(ZERO)]
    )
    hourly_price_per_gpu = models.DecimalField(
        _("hourly price per GPU"),
        max_digits=12,
        decimal_places=4,
        default=ZERO,
        validators=[MinValueValidator(ZERO)],
        help_text=_("A change of a price applies from the next UTC midnight: usage before it keeps the price it had."),
    )
    lending_price_share = models.DecimalField(
        _("lending price share"),
        max_digits=5,
        decimal_places=4,
        default=DEFAULT_LENDING_PRICE_SHARE,
        validators=[MinValueValidator(ZERO), MaxValueValidator(Decimal(1))],
        help_text=_(
            "Reserved pools: the share of the hourly price a lender is credited per GPU-hour lent (the platform keeps "
            "the rest)."
        ),
    )
    min_nodes = models.PositiveIntegerField(_("minimum nodes"), default=0)
    max_nodes = models.PositiveIntegerField(_("maximum nodes"), default=0)
    gpus_per_node = models.PositiveIntegerField(
        _("GPUs per node"),
        null=True,
        blank=True,
        help_text=_(
            "Elastic and shared pools: the GPUs of one node, so that Kueue may admit up to maximum nodes × GPUs per "
            "node. Empty: the largest node of the pool seen in the cluster."
        ),
    )
    spill_pools = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="spilled_from", verbose_name=_("may spill into")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = PoolQuerySet.as_manager()

    class Meta:
        verbose_name = _("pool")
        verbose_name_plural = _("pools")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=PoolKind.values), name="%(app_label)s_%(class)s_valid_kind"),
            models.CheckConstraint(condition=~Q(node_selector={}), name="%(app_label)s_%(class)s_selector_not_empty"),
            models.CheckConstraint(
                condition=Q(min_nodes__lte=F("max_nodes")), name="%(app_label)s_%(class)s_min_le_max"
            ),
            models.CheckConstraint(
                condition=~Q(kind=PoolKind.RESERVED) | Q(contracted_gpus__isnull=False),
                name="%(app_label)s_%(class)s_reserved_has_contract",
            ),
            models.CheckConstraint(
                condition=Q(monthly_price_per_gpu__gte=0) & Q(hourly_price_per_gpu__gte=0),
                name="%(app_label)s_%(class)s_prices_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(lending_price_share__gte=0) & Q(lending_price_share__lte=1),
                name="%(app_label)s_%(class)s_lending_share_between_0_and_1",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def lending_price_per_gpu(self) -> Decimal:
        """What a lender is credited per GPU-hour lent at the pool's prices now: `lending_price`."""
        return lending_price(self.hourly_price_per_gpu, self.lending_price_share)

    def clean(self) -> None:
        errors = {}
        if self.kind == PoolKind.RESERVED and self.contracted_gpus is None:
            errors["contracted_gpus"] = _("A reserved pool needs its contracted GPU count.")
        if self.min_nodes is not None and self.max_nodes is not None and self.min_nodes > self.max_nodes:
            errors["max_nodes"] = _("Maximum nodes (%(max)s) must be at least the minimum (%(min)s).") % {
                "max": self.max_nodes,
                "min": self.min_nodes,
            }
        if errors:
            raise ValidationError(errors)

    def matches(self, labels: dict) -> bool:
        """True when a node with `labels` belongs to this pool."""
        return all(labels.get(key) == value for key, value in self.node_selector.items())

    @property
    def is_reserved(self) -> bool:
        return self.kind == PoolKind.RESERVED


class Node(models.Model):
    """A Kubernetes node as last seen by sync; `pool` is the pool whose selector matches its labels."""

    name = models.CharField(_("name"), max_length=253, unique=True)
    pool = models.ForeignKey(
        Pool, verbose_name=_("pool"), on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes"
    )
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    taints = models.JSONField(_("taints"), default=list, blank=True)
    gpu_capacity = models.PositiveIntegerField(_("GPU capacity"), default=0)
    gpu_allocatable = models.PositiveIntegerField(_("GPU allocatable"), default=0)
    ready = models.BooleanField(_("ready"), default=False)
    missing_taints = models.JSONField(_("missing pool taints"), default=list, blank=True)
    unschedulable = models.BooleanField(_("cordoned"), default=False)
    last_seen_at = models.DateTimeField(_("last seen"), null=True, blank=True)

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_allocatable__lte=F("gpu_capacity")),
                name="%(app_label)s_%(class)s_allocatable_le_capacity",
            ),
        ]
        indexes = [models.Index(fields=["pool", "ready"], name="pools_node_pool_ready")]

    def __str__(self) -> str:
        return self.name


class ReservationQuerySet(TeamScopedQuerySet):
    def active_at(self, moment) -> "ReservationQuerySet":
        return self.filter(starts_at__lte=moment, ends_at__gt=moment)

    def overlapping(self, starts_at, ends_at) -> "ReservationQuerySet":
        return self.filter(starts_at__lt=ends_at, ends_at__gt=starts_at)

    def starting_or_ending_between(self, since, until) -> "ReservationQuerySet":
        """Reservations that start or end in (since, until]: what `active_at(since)` and `active_at(until)` disagree
        on (a reservation is active from its start, inclusive, to its end, exclusive)."""
        return self.filter(Q(starts_at__gt=since, starts_at__lte=until) | Q(ends_at__gt=since, ends_at__lte=until))


class Reservation(models.Model):
    """A team holds `gpus` GPUs of a reserved pool over [starts_at, ends_at), at the price signed for.

    Guarantee: at any moment the reservations of one pool add up to no more than its contracted GPUs
    (checked by `pools.services.create_reservation` under a lock on the pool row).
    """

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.PROTECT, related_name="reservations")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.PROTECT, related_name="reservations")
    gpus = models.PositiveIntegerField(_("GPUs"), validators=[MinValueValidator(1)])
    starts_at = models.DateTimeField(_("starts at"))
    ends_at = models.DateTimeField(_("ends at"))
    monthly_price_per_gpu = models.DecimalField(
        _("monthly price per GPU"), max_digits=12, decimal_places=2, validators=[MinValueValidator(ZERO)]
    )
    created_by = models.ForeignKey(
        "portal.User", verbose_name=_("created by"), on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # Lending (chosen by the team's leads; `pools.services.set_lending`, each change kept in `LendingChange` so that
    # metering knows the setting at every moment). Default: lend idle GPUs, keep none protected.
    lending = models.CharField(_("lending"), max_length=10, choices=Lending.choices, default=Lending.IDLE)
    protected_gpus = models.PositiveIntegerField(
        _("protected GPUs"), default=0, help_text=_("GPUs never lent, whatever the team's own jobs use.")
    )

    objects = ReservationQuerySet.as_manager()

    class Meta:
        verbose_name = _("reservation")
        verbose_name_plural = _("reservations")
        ordering = ["-starts_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="%(app_label)s_%(class)s_gpus_positive"),
            models.CheckConstraint(
                condition=Q(ends_at__gt=F("starts_at")), name="%(app_label)s_%(class)s_ends_after_starts"
            ),
            models.CheckConstraint(
                condition=Q(monthly_price_per_gpu__gte=0), name="%(app_label)s_%(class)s_price_not_negative"
            ),
        ]
        indexes = [
            models.Index(fields=["pool", "starts_at", "ends_at"], name="pools_reservation_pool_period"),
            # The frequent "did a reservation start or end since?" check (reconcile.kueue).
            models.Index(fields=["starts_at"], name="pools_reservation_starts"),
            models.Index(fields=["ends_at"], name="pools_reservation_ends"),
        ]

    def __str__(self) -> str:
        return f"{self.team} · {self.gpus} GPUs of {self.pool}"

    @property
    def lendable_gpus(self) -> int:
        """GPUs of this reservation others may borrow while idle, under its current setting."""
        return lendable_gpus(gpus=self.gpus, lending=self.lending, protected_gpus=self.protected_gpus)

    def clean(self) -> None:
        errors = {}
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            errors["ends_at"] = _("The reservation must end after it starts.")
        elif self.starts_at and self.ends_at and self.ends_at - self.starts_at > MAX_RESERVATION:
            # a typo in the year (2206, 9999) would mark decades of days for metering, or overflow a date
            errors["ends_at"] = _("A reservation lasts at most %(years)d years.") % {"years": MAX_RESERVATION_YEARS}
        if self.pool_id and not self.pool.is_reserved:
            errors["pool"] = _("Only reserved pools take reservations; %(pool)s is %(kind)s.") % {
                "pool": self.pool,
                "kind": self.pool.get_kind_display(),
            }
        if errors:
            raise ValidationError(errors)


class QuotaQuerySet(TeamScopedQuerySet):
    pass


class Quota(models.Model):
    """How many GPUs of a pool a team may use at once: its reservation plus any extra an admin grants."""

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.CASCADE, related_name="quotas")
    max_gpus = models.PositiveIntegerField(_("max GPUs at once"))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        verbose_name = _("quota")
        verbose_name_plural = _("quotas")
        ordering = ["team__name", "pool__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "pool"], name="%(app_label)s_%(class)s_unique_team_pool"),
            models.CheckConstraint(condition=Q(max_gpus__gte=0), name="%(app_label)s_%(class)s_gpus_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.team} · {self.max_gpus} GPUs of {self.pool}"


class NamespaceLimits(models.Model):
    """The team namespace's ResourceQuota and LimitRange of seed 003 (GPU totals come from the team's Quotas), and
    the caps on its volumes: checked when a volume is registered, and written into the ResourceQuota.

    CPU is in millicores and memory in MiB so that the values are exact integers.
    """

    team = models.OneToOneField(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="namespace_limits")
    requests_cpu_millicores = models.PositiveIntegerField(_("CPU requests (millicores)"), default=32_000)
    requests_memory_mib = models.PositiveIntegerField(_("memory requests (MiB)"), default=128 * 1024)
    max_pods = models.PositiveIntegerField(_("pods"), default=20)
    container_max_gpus = models.PositiveIntegerField(_("GPUs per container, max"), default=8)
    container_max_cpu_millicores = models.PositiveIntegerField(_("CPU per container, max"), default=8_000)
    container_max_memory_mib = models.PositiveIntegerField(_("memory per container, max (MiB)"), default=32 * 1024)
    container_min_cpu_millicores = models.PositiveIntegerField(_("CPU per container, min"), default=500)
    container_min_memory_mib = models.PositiveIntegerField(_("memory per container, min (MiB)"), default=1024)
    container_default_cpu_millicores = models.PositiveIntegerField(_("default CPU limit"), default=2_000)
    container_default_memory_mib = models.PositiveIntegerField(_("default memory limit (MiB)"), default=8 * 1024)
    container_default_request_cpu_millicores = models.PositiveIntegerField(_("default CPU request"), default=1_000)
    container_default_request_memory_mib = models.PositiveIntegerField(_("default memory request (MiB)"), default=4096)
    max_volumes = models.PositiveIntegerField(
        _("volumes, max"), default=10, help_text=_("Team volumes, and claims of the namespace, at most.")
    )
    max_volume_storage_gib = models.PositiveIntegerField(
        _("volume storage, max (GiB)"),
        default=10 * 1024,
        help_text=_("Total size the team's volumes and the namespace's claims may request."),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("namespace limits")
        verbose_name_plural = _("namespace limits")
        constraints = [
            models.CheckConstraint(
                condition=Q(container_min_cpu_millicores__lte=F("container_max_cpu_millicores"))
                & Q(container_min_memory_mib__lte=F("container_max_memory_mib")),
                name="%(app_label)s_%(class)s_min_le_max",
            ),
            models.CheckConstraint(
                condition=Q(container_default_request_cpu_millicores__lte=F("container_default_cpu_millicores"))
                & Q(container_default_request_memory_mib__lte=F("container_default_memory_mib")),
                name="%(app_label)s_%(class)s_request_le_limit",
            ),
        ]

    def __str__(self) -> str:
        return f"limits of {self.team}"

    def clean(self) -> None:
        """Kubernetes refuses a LimitRange unless, for each of cpu and memory, min ≤ default request ≤ default limit ≤
        max: a refused one would leave the team's namespace unreconciled and its jobs unsent. Each pair out of order
        is named on its lower field (one message per field)."""
        errors = {}
        for lower, higher, message in _LIMITS_IN_ORDER:
            if getattr(self, lower) > getattr(self, higher) and lower not in errors:
                errors[lower] = message
        if errors:
            raise ValidationError(errors)


# (lower field, higher field, message) of NamespaceLimits: what Kubernetes requires of a LimitRange, per resource.
_LIMITS_IN_ORDER = [
    (f"container_{lower}", f"container_{higher}", message)
    for lower, higher, message in (
        ("min_cpu_millicores", "max_cpu_millicores", _("The minimum CPU per container is above the maximum.")),
        ("min_memory_mib", "max_memory_mib", _("The minimum memory per container is above the maximum.")),
        (
            "min_cpu_millicores",
            "default_request_cpu_millicores",
            _("The minimum CPU per container is above the default CPU request."),
        ),
        (
            "min_memory_mib",
            "default_request_memory_mib",
            _("The minimum memory per container is above the default memory request."),
        ),
        (
            "default_request_cpu_millicores",
            "default_cpu_millicores",
            _("The default CPU request is above the default limit."),
        ),
        (
            "default_request_memory_mib",
            "default_memory_mib",
            _("The default memory request is above the default limit."),
        ),
        (
            "default_cpu_millicores",
            "max_cpu_millicores",
            _("The default CPU limit is above the maximum per container."),
        ),
        ("default_memory_mib", "max_memory_mib", _("The default memory limit is above the maximum per container.")),
    )
]


class TeamNamespace(models.Model):
    """Whether the team namespace in the cluster matches the portal's quotas and limits.

    Every change to a team's quotas or limits bumps `desired_version`; the reconcile task copies it into
    `applied_version` once the ResourceQuota and LimitRange it rendered are in the cluster. "Applied" therefore
    means applied_version == desired_version.
    """

    team = models.OneToOneField(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="namespace_state")
    desired_version = models.PositiveIntegerField(_("desired version"), default=1)
    applied_version = models.PositiveIntegerField(_("applied version"), default=0)
    applied_at = models.DateTimeField(_("applied at"), null=True, blank=True)
    last_checked_at = models.DateTimeField(_("last checked at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    # What the portal last wrote, per kind: a cluster object that differs from it was edited by hand.
    applied_spec = models.JSONField(_("applied spec"), default=dict, blank=True)

    class Meta:
        verbose_name = _("team namespace")
        verbose_name_plural = _("team namespaces")

    def __str__(self) -> str:
        return f"namespace of {self.team}"

    @property
    def is_applied(self) -> bool:
        return self.applied_version >= self.desired_version


class QuotaRequestQuerySet(TeamScopedQuerySet):
    def visible_to(self, user) -> "QuotaRequestQuerySet":
        """A lead sees the requests of the teams they lead; a platform admin sees every request."""
        return self.led_by(user)

    def pending(self) -> "QuotaRequestQuerySet":
        return self.filter(state=QuotaRequestState.PENDING)


class QuotaRequest(models.Model):
    """A team lead asks for a team's quota in a pool to become `max_gpus`; a platform admin approves or rejects it.

    Guarantees: at most one pending request per (team, pool) (a partial unique constraint); a request leaves
    `pending` exactly once, to approved, rejected or withdrawn, recording who decided and when; an approved request's
    quota was set through `pools.services.set_quota` in the same transaction as the approval.
    """

    team = models.ForeignKey(Team, verbose_name=_("team"), on_delete=models.CASCADE, related_name="quota_requests")
    pool = models.ForeignKey(Pool, verbose_name=_("pool"), on_delete=models.CASCADE, related_name="quota_requests")
    max_gpus = models.PositiveIntegerField(_("requested max GPUs at once"))
    previous_max_gpus = models.PositiveIntegerField(
        _("quota when requested"), default=0, help_text=_("The team's quota in the pool when the request was made.")
    )
    reason = models.TextField(
        _("reason"),
        max_length=2000,
        error_messages={"blank": _("Say why the team needs this change: the admins decide on it.")},
    )
    requested_by = models.ForeignKey(
        "portal.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("asked by")
    )
    created_at = models.DateTimeField(_("asked at"), auto_now_add=True)
    state = models.CharField(
        _("state"), max_length=20, choices=QuotaRequestState.choices, default=QuotaRequestState.PENDING
    )
    decided_by = models.ForeignKey(
        "portal.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("decided by")
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decision_note = models.TextField(_("decision note"), max_length=2000, blank=True)

    objects = QuotaRequestQuerySet.as_manager()

    class Meta:
        verbose_name = _("quota request")
        verbose_name_plural = _("quota requests")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(max_gpus__gte=0), name="%(app_label)s_%(class)s_gpus_not_negative"),
            models.CheckConstraint(
                condition=Q(state__in=QuotaRequestState.values), name="%(app_label)s_%(class)s_valid_state"
            ),
            models.CheckConstraint(
                condition=Q(state=QuotaRequestState.PENDING, decided_at__isnull=True)
                | (~Q(state=QuotaRequestState.PENDING) & Q(decided_at__isnull=False)),
                name="%(app_label)s_%(class)s_decided_at_iff_decided",
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="%(app_label)s_%(class)s_reason_not_empty"),
            models.UniqueConstraint(
                fields=["team", "pool"],
                condition=Q(state=QuotaRequestState.PENDING),
                name="%(app_label)s_%(class)s_one_pending_per_team_pool",
                violation_error_message=_("A request for this team and pool is already pending."),
            ),
        ]
        indexes = [models.Index(fields=["team", "-created_at"], name="pools_quotareq_team_created")]

    def __str__(self) -> str:
        return f"{self.team} · {self.pool}: {self.previous_max_gpus} → {self.max_gpus} GPUs ({self.state})"

    @property
    def is_pending(self) -> bool:
        return self.state == QuotaRequestState.PENDING

    def check_transition(self, state: str) -> None:
        """Raise a ValidationError unless the request may move to `state` (only a pending request moves)."""
        if state not in QUOTA_REQUEST_TRANSITIONS[self.state]:
            raise ValidationError(
                _("This request was already %(state)s on %(day)s; only a pending request can change.")
                % {
                    "state": self.get_state_display().lower(),
                    "day": date_format(self.decided_at, "SHORT_DATE_FORMAT") if self.decided_at else "?",
                }
            )

    def transition_to(self, state: str, *, user, note: str = "") -> None:
        """Move to `state` if that edge exists, recording who decided and when (the caller holds the row lock)."""
        from django.utils import timezone

        self.check_transition(state)
        self.state = state
        self.decided_by = user if user is not None and user.is_authenticated else None
        self.decided_at = timezone.now()
        self.decision_note = note


class KueueProjection(models.Model):
    """Whether Kueue's objects in the cluster match the portal (a single row, pk 1; see `pools.projection` and
    `reconcile.kueue`).

    Every change of pools, reservations, quotas, namespace limits or teams bumps `desired_version` once committed;
    a reconcile reads it before the rows it renders and copies it into `applied_version` once every object is in
    the cluster. `rendered_at` is the moment whose active reservations the last applied projection holds, and
    `last_rendered_at` that of the last attempt: a reservation that starts or ends after it calls for a new one.
    """

    SINGLETON_PK = 1

    desired_version = models.PositiveIntegerField(_("desired version"), default=1)
    applied_version = models.PositiveIntegerField(_("applied version"), default=0)
    applied_at = models.DateTimeField(_("applied at"), null=True, blank=True)
    rendered_at = models.DateTimeField(_("rendered at"), null=True, blank=True)
    last_rendered_at = models.DateTimeField(_("last rendered at"), null=True, blank=True)
    last_checked_at = models.DateTimeField(_("last checked at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    # Per object ("Kind/name"), a digest of what the portal last wrote: a cluster object that differs from it was
    # edited by hand (a change of the portal's own rows is not).
    applied_digests = models.JSONField(_("applied digests"), default=dict, blank=True)

    class Meta:
        verbose_name = _("Kueue projection")
        verbose_name_plural = _("Kueue projections")
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_single_row"),
        ]

    def __str__(self) -> str:
        return "Kueue projection"
