"""Teams over the API: members see theirs, platform admins manage all of them through `pools.teams`."""

from django.utils.translation import gettext_lazy
from rest_framework import viewsets

from portal.api.base import AdminWrites
from portal.api.filters import TeamFilterSet
from portal.api.serializers import TeamSerializer
from portal.models import Team

from .. import teams


class TeamViewSet(viewsets.ModelViewSet):
    api_description = gettext_lazy("Teams: members see theirs, platform admins see and manage all of them.")

    serializer_class = TeamSerializer
    permission_classes = [AdminWrites]
    filterset_class = TeamFilterSet
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9-]+"
    ordering_fields = ["name", "slug", "created_at"]
    ordering = ["name"]

    def get_queryset(self):
        return Team.objects.visible_to(self.request.user).order_by("name", "-id")

    def perform_create(self, serializer):
        serializer.instance = teams.save_team(team=Team(**serializer.validated_data), user=self.request.user)

    def perform_update(self, serializer):
        # only the fields sent: the service applies them to the row it locks (another change meanwhile stays)
        serializer.instance = teams.save_team(
            team=serializer.instance, changes=dict(serializer.validated_data), user=self.request.user
        )

    def perform_destroy(self, instance):
        teams.delete_team(team=instance, user=self.request.user)
