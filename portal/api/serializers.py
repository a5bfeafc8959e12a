from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from ..models import ApiToken, AuditEntry, Membership, Team, User
from .base import FullCleanMixin, refuse_fixed_fields


class TeamSerializer(FullCleanMixin, serializers.ModelSerializer):
    namespace = serializers.CharField(read_only=True)

    class Meta:
        model = Team
        fields = [
            "id",
            "slug",
            "name",
            "description",
            "queueing_strategy",
            "allow_high_priority",
            "namespace",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


class UserSlugField(serializers.SlugRelatedField):
    default_error_messages = {"does_not_exist": _("Unknown user '{value}'.")}

    def __init__(self, **kwargs):
        super().__init__(slug_field="username", **kwargs)


class TeamSlugField(serializers.SlugRelatedField):
    default_error_messages = {"does_not_exist": _("Unknown team '{value}'.")}

    def __init__(self, **kwargs):
        super().__init__(slug_field="slug", **kwargs)


class MembershipSerializer(serializers.ModelSerializer):
    team = TeamSlugField(queryset=Team.objects.all())
    user = UserSlugField(queryset=User.objects.filter(is_active=True))

    class Meta:
        model = Membership
        fields = ["id", "team", "user", "role", "source", "created_at"]
        read_only_fields = ["id", "source", "created_at"]
        validators = []  # the unique (user, team) rule is checked once, by the model, in the service


class MembershipUpdateSerializer(MembershipSerializer):
    """PUT/PATCH of a membership: it moves to another role, never to another person or team. A body naming another
    team or user is refused (the same ones, as a GET answered them, are accepted)."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)

    def validate(self, attrs):
        message = _("A membership is of one person in one team: only its role can change. Add a membership instead.")
        refuse_fixed_fields(
            data=self.initial_data,
            instance=self.instance,
            messages={"team": message, "user": message},
            serializer_class=MembershipSerializer,
        )
        return super().validate(attrs)


class ApiTokenSerializer(serializers.ModelSerializer):
    user = UserSlugField(queryset=User.objects.filter(is_active=True), help_text=_("The user the token acts as."))
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    revoked_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "user",
            "prefix",
            "created_by",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "revoked_by",
            "is_active",
        ]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class NewApiTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text=_("The secret. Shown only now: store it safely."))

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor_username", read_only=True, help_text=_("Username of who made the change; empty: the system.")
    )

    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "action", "object_type", "object_id", "object_repr", "before", "after"]
