"""Team volumes and secrets. Members of a team read them (names, kinds, keys, states: never a value); platform
admins and the team's leads register, rotate and remove them (others: 403; another team's: 404 or "unknown
team")."""

from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from .. import services
from ..filters import TeamSecretFilterSet, TeamVolumeFilterSet
from ..models import TeamSecret, TeamVolume
from .serializers import (
    NewSecretSerializer,
    SecretValuesSerializer,
    TeamSecretSerializer,
    TeamVolumeSerializer,
    VolumeAccessSerializer,
)


class _TeamDataViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    ordering_fields = ["name", "created_at"]
    ordering = ["team__name", "name"]


class TeamVolumeViewSet(_TeamDataViewSet):
    """Volumes (PersistentVolumeClaims) of teams, for their jobs to mount. Registering one answers 201 with state
    `pending`; the portal then creates the claim (if new) and records what the cluster says of it."""

    serializer_class = TeamVolumeSerializer
    filterset_class = TeamVolumeFilterSet

    def get_queryset(self):
        return (
            TeamVolume.objects.visible_to(self.request.user)
            .select_related("team", "created_by")
            .order_by("team__name", "name", "-id")
        )

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = services.register_volume(
            team=data["team"],
            user=self.request.user,
            name=data["name"],
            source=data["source"],
            size_gib=data.get("size_gib"),
            access_mode=data.get("access_mode", ""),
            storage_class=data.get("storage_class", ""),
            read_only_for_researchers=data.get("read_only_for_researchers", False),
        )

    @extend_schema(request=VolumeAccessSerializer, responses={200: TeamVolumeSerializer})
    @action(detail=True, methods=["post"])
    def access(self, request, pk=None):
        """Mark the volume read-only for researchers, or let them write again (leads and admins)."""
        volume = self.get_object()
        serializer = VolumeAccessSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        volume = services.set_read_only_for_researchers(
            volume=volume, user=request.user, read_only=serializer.validated_data["read_only_for_researchers"]
        )
        return Response(TeamVolumeSerializer(volume, context=self.get_serializer_context()).data)

    def perform_destroy(self, instance):
        services.unregister_volume(volume=instance, user=self.request.user)


@method_decorator(sensitive_post_parameters("password", "values"), name="dispatch")
@method_decorator(sensitive_variables(), name="dispatch")
class TeamSecretViewSet(_TeamDataViewSet):
    """Secrets of teams: image pull credentials and named key/value secrets, kept only as Kubernetes Secrets in the
    team namespace. The values are write-only, and kept out of error reports (the request's form data and every
    frame's variables)."""

    serializer_class = TeamSecretSerializer
    filterset_class = TeamSecretFilterSet

    def get_queryset(self):
        return (
            TeamSecret.objects.visible_to(self.request.user)
            .select_related("team", "created_by", "rotated_by")
            .order_by("team__name", "name", "-id")
        )

    def get_serializer_class(self):
        if self.action == "create":
            return NewSecretSerializer
        if self.action == "rotate":
            return SecretValuesSerializer
        return TeamSecretSerializer

    @extend_schema(request=NewSecretSerializer, responses={201: TeamSecretSerializer})
    def create(self, request, *args, **kwargs):
        """Create a secret in the team namespace (a name the team already uses is refused: rotate that one)."""
        serializer = NewSecretSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        secret = services.save_secret(
            team=data["team"],
            user=request.user,
            name=data["name"],
            kind=data["kind"],
            values=data.get("values"),
            registry=data.get("registry", ""),
            username=data.get("username", ""),
            password=data.get("password", ""),
            create_only=True,
        )
        return Response(TeamSecretSerializer(secret).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=SecretValuesSerializer, responses={200: TeamSecretSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """Replace the secret's values (all of them) in the cluster; the answer says who rotated it and when."""
        secret = self.get_object()
        serializer = SecretValuesSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        secret = services.save_secret(
            team=secret.team,
            user=request.user,
            name=secret.name,
            kind=secret.kind,
            values=data.get("values"),
            registry=data.get("registry", "") or secret.registry,
            username=data.get("username", ""),
            password=data.get("password", ""),
        )
        return Response(TeamSecretSerializer(secret).data)

    def perform_destroy(self, instance):
        services.delete_secret(secret=instance, user=self.request.user)
