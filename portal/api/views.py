"""Memberships, API tokens and the audit log (teams: `pools.api.teams`). Reads are scoped by `visible_to`; writes go
through `portal.services`, which audit them."""

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from .. import services
from ..models import ApiToken, AuditEntry, Membership
from .base import AdminOnly, AdminWrites
from .filters import ApiTokenFilterSet, AuditEntryFilterSet, MembershipFilterSet
from .serializers import (
    ApiTokenSerializer,
    AuditEntrySerializer,
    MembershipSerializer,
    MembershipUpdateSerializer,
    NewApiTokenSerializer,
)


class MembershipViewSet(viewsets.ModelViewSet):
    api_description = gettext_lazy(
        "Who is in which team with which role. Members see their teams' memberships; admins manage them."
    )

    serializer_class = MembershipSerializer
    permission_classes = [AdminWrites]
    filterset_class = MembershipFilterSet
    ordering_fields = ["created_at", "role"]
    ordering = ["team__name", "user__username"]

    def get_queryset(self):
        return (
            Membership.objects.visible_to(self.request.user)
            .select_related("team", "user")
            .order_by("team__name", "user__username", "-id")
        )

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.add_member(
            team=data["team"], member=data["user"], role=data.get("role", "researcher"), user=self.request.user
        )

    def perform_update(self, serializer):
        role = serializer.validated_data.get("role", serializer.instance.role)
        serializer.instance = services.change_role(membership=serializer.instance, role=role, user=self.request.user)

    def perform_destroy(self, instance):
        services.remove_member(membership=instance, user=self.request.user)

    def get_serializer_class(self):
        return MembershipUpdateSerializer if self.action in ("update", "partial_update") else MembershipSerializer


class ApiTokenViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    api_description = gettext_lazy(
        "API tokens, made and revoked by platform admins. The secret is shown once, in the answer to its creation."
    )

    serializer_class = ApiTokenSerializer
    permission_classes = [AdminOnly]
    filterset_class = ApiTokenFilterSet
    ordering_fields = ["created_at", "last_used_at", "name"]
    ordering = ["-created_at"]

    def get_queryset(self):
        return ApiToken.objects.select_related("user", "created_by", "revoked_by").order_by("-created_at", "-id")

    @extend_schema(request=ApiTokenSerializer, responses={201: NewApiTokenSerializer})
    def create(self, request, *args, **kwargs):
        serializer = ApiTokenSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        token, secret = services.create_token(
            owner=data["user"], name=data["name"], expires_at=data.get("expires_at"), user=request.user
        )
        token.token = secret
        response = Response(NewApiTokenSerializer(token).data, status=status.HTTP_201_CREATED)
        response.never_compress = True  # the plaintext secret: never compressed (portal/compression.py, BREACH)
        return response

    @extend_schema(
        request=None, responses={200: ApiTokenSerializer}, description=gettext_lazy("Revoke the token at once.")
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = services.revoke_token(token=self.get_object(), user=request.user)
        return Response(ApiTokenSerializer(token).data)


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    api_description = gettext_lazy(
        "Every write made through the API, the pages or Django admin: who, what, before and after, and when."
    )

    serializer_class = AuditEntrySerializer
    permission_classes = [AdminOnly]
    filterset_class = AuditEntryFilterSet
    ordering_fields = ["at", "id"]
    ordering = ["-at", "-id"]

    def get_queryset(self):
        return AuditEntry.objects.order_by("-at", "-id")
