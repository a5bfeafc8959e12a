"""Pools, nodes, occupancy, reservations, quotas and namespace limits. Everyone signed in reads pools, nodes and
occupancy; team-scoped rows are filtered by `visible_to`; only platform admins write, through `pools.services`."""

from django.db.models import OuterRef
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from jobs.models import Job
from jobs.specs import MAX_GPUS_PER_JOB, MAX_NODES_PER_JOB
from portal.api.base import AdminWrites
from portal.models import Team

from .. import services
from ..filters import (
    NamespaceLimitsFilterSet,
    NodeFilterSet,
    PoolFilterSet,
    QuotaFilterSet,
    QuotaRequestFilterSet,
    ReservationFilterSet,
)
from ..models import NamespaceLimits, Node, Pool, Quota, QuotaRequest, Reservation
from ..occupancy import JOB_SIZES, Occupancy, gang_fit, pool_occupancy
from .serializers import (
    NamespaceLimitsSerializer,
    NodeSerializer,
    OccupancySerializer,
    PoolSerializer,
    QuotaChangeSerializer,
    QuotaRequestCreateSerializer,
    QuotaRequestDecisionSerializer,
    QuotaRequestSerializer,
    QuotaSerializer,
    ReservationEndSerializer,
    ReservationLendingSerializer,
    ReservationSerializer,
)

GANG_PARAMETERS = [
    OpenApiParameter("nodes", int, description="with gpus: say whether nodes × gpus (one pod per node) fits now"),
    OpenApiParameter("gpus", int, description="GPUs per node of that job"),
]


def _occupancy_row(pool: Pool, occupancy: Occupancy | None, gang: tuple[int, int] | None = None) -> dict:
    occupancy = occupancy or Occupancy(pool_id=pool.pk)
    return {
        "pool": pool.slug,
        "contracted_gpus": pool.contracted_gpus,
        "live_gpus": occupancy.live_gpus,
        "allocated": occupancy.allocated,
        "held_not_ready": occupancy.held_not_ready,
        "free": occupancy.free,
        "nodes_ready": occupancy.nodes_ready,
        "nodes_not_ready": occupancy.nodes_not_ready,
        "largest_free_block": occupancy.largest_free_block,
        "fits": {str(size): occupancy.fits[size] for size in JOB_SIZES},
        "stranded": {str(size): occupancy.stranded(size) for size in JOB_SIZES},
        "nodes_with_free": {str(size): occupancy.nodes_with_free(size) for size in JOB_SIZES},
        **_gang_fit_row(occupancy, gang),
    }


def _gang_fit_row(occupancy: Occupancy, gang: tuple[int, int] | None) -> dict:
    if gang is None:
        return {}
    fit = gang_fit(occupancy, nodes=gang[0], gpus=gang[1])
    return {"gang": {"nodes": fit.nodes, "gpus": fit.gpus, "nodes_with_room": fit.nodes_with_room, "fits": fit.fits}}


def _gang_asked(request) -> tuple[int, int] | None:
    """`?nodes=N&gpus=G`: also say whether a job of N nodes × G GPUs (one pod per node) fits now."""
    if "nodes" not in request.query_params and "gpus" not in request.query_params:
        return None
    try:
        nodes = int(request.query_params.get("nodes", "1"))
        gpus = int(request.query_params.get("gpus", "1"))
    except ValueError:
        nodes = gpus = 0
    if not (1 <= nodes <= MAX_NODES_PER_JOB and 1 <= gpus <= MAX_GPUS_PER_JOB):
        raise exceptions.ValidationError(
            {
                "detail": _("nodes must be 1 to %(nodes)d and gpus 1 to %(gpus)d.")
                % {"nodes": MAX_NODES_PER_JOB, "gpus": MAX_GPUS_PER_JOB}
            }
        )
    return nodes, gpus


class PoolViewSet(viewsets.ModelViewSet):
    api_description = gettext_lazy(
        "GPU pools. Every signed-in user sees every pool and its occupancy; platform admins manage them."
    )

    serializer_class = PoolSerializer
    permission_classes = [AdminWrites]
    filterset_class = PoolFilterSet
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"
    ordering_fields = ["name", "slug", "kind", "contracted_gpus"]
    ordering = ["name"]

    def get_queryset(self):
        return Pool.objects.visible_to(self.request.user).prefetch_related("spill_pools").order_by("name", "-id")

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        spill_pools = data.pop("spill_pools", None)
        serializer.instance = services.save_pool(pool=Pool(**data), spill_pools=spill_pools, user=self.request.user)

    def perform_update(self, serializer):
        # only the fields sent: the service applies them to the row it locks (another change meanwhile stays)
        changes = dict(serializer.validated_data)
        spill_pools = changes.pop("spill_pools", None)
        serializer.instance = services.save_pool(
            pool=serializer.instance, changes=changes, spill_pools=spill_pools, user=self.request.user
        )

    def perform_destroy(self, instance):
        services.delete_pool(pool=instance, user=self.request.user)

    @extend_schema(
        operation_id="pools_occupancy_list",
        responses=OccupancySerializer(many=True),
        parameters=GANG_PARAMETERS,
        description=gettext_lazy("GPUs capacity / allocated / free and fragmentation of every pool, right now."),
    )
    @action(detail=False, methods=["get"], url_path="occupancy", filterset_class=None, pagination_class=None)
    def occupancy_list(self, request):
        gang = _gang_asked(request)
        pools = list(self.get_queryset())
        occupancy = pool_occupancy([pool.pk for pool in pools])
        rows = [_occupancy_row(p, occupancy.get(p.pk), gang) for p in pools]
        return Response(OccupancySerializer(rows, many=True).data)

    @extend_schema(
        operation_id="pools_occupancy_retrieve",
        responses=OccupancySerializer,
        parameters=GANG_PARAMETERS,
        description=gettext_lazy("GPUs capacity / allocated / free and fragmentation of one pool, right now."),
    )
    @action(detail=True, methods=["get"])
    def occupancy(self, request, slug=None):
        gang = _gang_asked(request)
        pool = self.get_object()
        row = _occupancy_row(pool, pool_occupancy([pool.pk]).get(pool.pk), gang)
        return Response(OccupancySerializer(row).data)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy("GPU nodes as last seen by sync. Like pools, every signed-in user sees them.")

    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.-]+"
    ordering_fields = ["name", "gpu_allocatable", "last_seen_at"]
    ordering = ["name"]

    def get_queryset(self):
        visible_pools = Pool.objects.visible_to(self.request.user)
        return Node.objects.filter(pool__in=visible_pools).select_related("pool").order_by("name")


class ReservationViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "Reservations of the caller's teams (all for admins). Admins reserve GPUs and move a reservation's "
        "end; a pool's reservations never exceed its contracted GPUs at any moment."
    )

    serializer_class = ReservationSerializer
    permission_classes = [AdminWrites]
    filterset_class = ReservationFilterSet
    ordering_fields = ["starts_at", "ends_at", "gpus", "created_at"]
    ordering = ["-starts_at"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        return (
            Reservation.objects.visible_to(self.request.user)
            .select_related("team", "pool", "created_by")
            .order_by("-starts_at", "-id")
        )

    def perform_create(self, serializer):
        serializer.instance = services.create_reservation(**serializer.validated_data, user=self.request.user)

    @extend_schema(
        request=ReservationLendingSerializer,
        responses=ReservationSerializer,
        description=gettext_lazy(
            "Choose what the reservation lends to other teams while its GPUs are idle: none, idle, or protect (all "
            "but protected_gpus). Leads of the reservation's team and platform admins; it reaches Kueue at once "
            "(the team ClusterQueue's lendingLimit) and is audited."
        ),
    )
    @action(detail=True, methods=["post"], permission_classes=[IsAuthenticated])
    def lending(self, request, pk=None):
        reservation = self.get_object()
        if not services.can_set_lending(request.user, reservation):
            raise exceptions.PermissionDenied(
                _("Only a lead of the team or a platform admin may change what its reservation lends.")
            )
        change = ReservationLendingSerializer(data=request.data)
        change.is_valid(raise_exception=True)
        reservation = services.set_lending(
            reservation=reservation,
            lending=change.validated_data["lending"],
            protected_gpus=change.validated_data.get("protected_gpus") or 0,
            user=request.user,
        )
        return Response(ReservationSerializer(reservation).data)

    @extend_schema(
        request=ReservationEndSerializer,
        responses=ReservationSerializer,
        description=gettext_lazy("Move the reservation's end (the only thing that changes on a contract)."),
    )
    def partial_update(self, request, *args, **kwargs):
        reservation = self.get_object()
        change = ReservationEndSerializer(reservation, data=request.data)
        change.is_valid(raise_exception=True)
        reservation = services.end_reservation(
            reservation=reservation, ends_at=change.validated_data["ends_at"], user=request.user
        )
        return Response(ReservationSerializer(reservation).data)


class QuotaViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "GPUs per pool a team may use at once. POST sets a team's quota in a pool (creating it when missing);"
        " PUT/PATCH change `max_gpus`. The change reaches the team namespace's ResourceQuota through the "
        "reconcile task: `namespace.applied` says whether the cluster has it yet."
    )

    serializer_class = QuotaSerializer
    permission_classes = [AdminWrites]
    filterset_class = QuotaFilterSet
    ordering_fields = ["max_gpus", "updated_at", "team__slug", "pool__slug"]
    ordering = ["team__name", "pool__name"]

    def get_queryset(self):
        quotas = Quota.objects.visible_to(self.request.user).select_related("team", "pool")
        if self.action in ("update", "partial_update"):
            return quotas  # the quota to change; `set_quota` answers with its GPUs in use (`_answer`)
        return quotas.annotate(
            gpus_in_use=Job.objects.gpus_in_use_of(team=OuterRef("team"), pool=OuterRef("pool"))
        ).order_by("team__name", "pool__name", "-id")

    def _answer(self, quota: Quota, status_code: int) -> Response:
        """The quota `set_quota` saved, with the GPUs in use it read under the team's lock (`Quota.gpus_in_use`):
        nothing is read again."""
        return Response(QuotaSerializer(quota).data, status=status_code)

    @extend_schema(
        request=QuotaSerializer,
        responses={200: QuotaSerializer, 201: QuotaSerializer},
        description=gettext_lazy("Set a team's quota in a pool: 201 when it did not exist, 200 when it changed."),
    )
    def create(self, request, *args, **kwargs):
        serializer = QuotaSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        existed = Quota.objects.filter(team=data["team"], pool=data["pool"]).exists()
        quota = services.set_quota(team=data["team"], pool=data["pool"], max_gpus=data["max_gpus"], user=request.user)
        return self._answer(quota, status.HTTP_200_OK if existed else status.HTTP_201_CREATED)

    @extend_schema(request=QuotaChangeSerializer, responses=QuotaSerializer)
    def update(self, request, *args, **kwargs):
        quota = self.get_object()
        change = QuotaChangeSerializer(quota, data=request.data)
        change.is_valid(raise_exception=True)
        quota = services.set_quota(
            team=quota.team, pool=quota.pool, max_gpus=change.validated_data["max_gpus"], user=request.user
        )
        return self._answer(quota, status.HTTP_200_OK)

    @extend_schema(request=QuotaChangeSerializer, responses=QuotaSerializer)
    def partial_update(self, request, *args, **kwargs):
        return self.update(request, *args, **kwargs)


class NamespaceLimitsViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "The team namespace's ResourceQuota and LimitRange values (seed 003), addressed by team slug. A team "
        "without its own limits shows the defaults. Changes reach the cluster through the reconcile task."
    )

    serializer_class = NamespaceLimitsSerializer
    permission_classes = [AdminWrites]
    filterset_class = NamespaceLimitsFilterSet
    lookup_field = "team"
    lookup_value_regex = r"[a-z0-9-]+"
    ordering_fields = ["slug", "name"]
    ordering = ["name"]
    queryset = Team.objects.none()  # for the schema; rows come from get_queryset

    def get_queryset(self):
        return Team.objects.visible_to(self.request.user).order_by("name", "-id")

    @staticmethod
    def _limits_of(team: Team) -> NamespaceLimits:
        return NamespaceLimits.objects.filter(team=team).select_related("team").first() or NamespaceLimits(team=team)

    def get_object(self):
        team = get_object_or_404(self.get_queryset(), slug=self.kwargs["team"])
        limits = self._limits_of(team)
        self.check_object_permissions(self.request, limits)
        return limits

    def list(self, request, *args, **kwargs):
        teams = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(teams)
        stored = {limits.team_id: limits for limits in NamespaceLimits.objects.filter(team__in=page)}
        rows = [stored.get(team.pk) or NamespaceLimits(team=team) for team in page]
        return self.get_paginated_response(NamespaceLimitsSerializer(rows, many=True).data)

    def perform_update(self, serializer):
        limits = serializer.instance
        serializer.instance = services.set_namespace_limits(
            team=limits.team, user=self.request.user, **serializer.validated_data
        )


class QuotaRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "Team leads' requests to change a quota. Leads see and make their teams' requests and withdraw their "
        "own; platform admins see all and approve (the quota is set at once, or the approval fails with the "
        "reason and the request stays pending) or reject. Researchers see none. At most one request per team "
        "and pool is pending."
    )

    serializer_class = QuotaRequestSerializer
    filterset_class = QuotaRequestFilterSet
    ordering_fields = ["created_at", "decided_at", "max_gpus"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self):
        return (
            QuotaRequest.objects.visible_to(self.request.user)
            .select_related("team", "pool", "requested_by", "decided_by")
            .order_by("-created_at", "-id")
        )

    @extend_schema(
        request=QuotaRequestCreateSerializer,
        responses={201: QuotaRequestSerializer},
        description=gettext_lazy("Ask for a team's quota in a pool to change (team leads)."),
    )
    def create(self, request, *args, **kwargs):
        serializer = QuotaRequestCreateSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if not services.can_request_quota_change(request.user, data["team"]):
            raise exceptions.PermissionDenied(_("Only a lead of the team can request a change of its quota."))
        quota_request = services.request_quota_change(**data, user=request.user)
        return Response(QuotaRequestSerializer(quota_request).data, status=status.HTTP_201_CREATED)

    def _decide(self, request, decide):
        quota_request = self.get_object()
        if not request.user.is_admin:
            raise exceptions.PermissionDenied(_("Only platform admins decide on quota requests."))
        decision = QuotaRequestDecisionSerializer(data=request.data)
        decision.is_valid(raise_exception=True)
        quota_request = decide(request=quota_request, user=request.user, note=decision.validated_data["note"])
        return Response(QuotaRequestSerializer(quota_request).data)

    @extend_schema(
        request=QuotaRequestDecisionSerializer,
        responses=QuotaRequestSerializer,
        description=gettext_lazy(
            "Approve a pending request: the team's quota becomes the requested GPUs. When that is refused "
            "(below the team's reservation or what its running jobs use) the answer is 400 with the reason and the "
            "request stays pending. Platform admins only."
        ),
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide(request, services.approve_quota_request)

    @extend_schema(
        request=QuotaRequestDecisionSerializer,
        responses=QuotaRequestSerializer,
        description=gettext_lazy("Reject a pending request; the quota stays as it is. Platform admins only."),
    )
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide(request, services.reject_quota_request)

    @extend_schema(
        request=None,
        responses=QuotaRequestSerializer,
        description=gettext_lazy("Take back a pending request. Only the lead who made it."),
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        quota_request = self.get_object()
        if quota_request.requested_by_id != request.user.pk:
            raise exceptions.PermissionDenied(_("Only the lead who made a request can withdraw it."))
        quota_request = services.withdraw_quota_request(request=quota_request, user=request.user)
        return Response(QuotaRequestSerializer(quota_request).data)
