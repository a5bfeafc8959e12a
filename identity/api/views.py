"""Group rules (which provider group gives which team role, or platform admin): platform admins only; writes go
through `identity.services`, which audit them."""

from django.utils.translation import gettext_lazy
from rest_framework import viewsets

from portal.api.base import AdminOnly

from .. import services
from ..models import GroupRule
from .serializers import GroupRuleSerializer


class GroupRuleViewSet(viewsets.ModelViewSet):
    api_description = gettext_lazy(
        "Rules that map the identity provider's groups to team roles or platform admin, applied at every sign-in."
    )

    serializer_class = GroupRuleSerializer
    permission_classes = [AdminOnly]
    filterset_fields = ["group", "platform_admin"]
    ordering_fields = ["group", "created_at"]
    ordering = ["group"]

    def get_queryset(self):
        return GroupRule.objects.select_related("team").order_by("group", "team__name", "id")

    def perform_create(self, serializer):
        serializer.instance = services.create_rule(user=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.update_rule(
            rule=serializer.instance, user=self.request.user, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.delete_rule(rule=instance, user=self.request.user)
