from rest_framework import serializers

from portal.api.base import FullCleanMixin
from portal.api.serializers import TeamSlugField
from portal.models import Team

from ..models import GroupRule


class GroupRuleSerializer(FullCleanMixin, serializers.ModelSerializer):
    team = TeamSlugField(queryset=Team.objects.all(), required=False, allow_null=True)

    class Meta:
        model = GroupRule
        fields = ["id", "group", "team", "role", "platform_admin", "created_at"]
        read_only_fields = ["id", "created_at"]
        validators = []  # the unique rules are checked once, by the model, in the service
