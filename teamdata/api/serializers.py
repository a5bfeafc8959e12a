"""Team volumes and secrets in the API. A secret's values are write-only: they go into the request and to the
cluster, and no answer ever holds them."""

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from portal.api.base import WholeNumberField
from portal.api.serializers import TeamSlugField
from portal.models import Team

from ..choices import AccessMode, SecretKind, VolumeSource
from ..models import MAX_VOLUME_GIB, TeamSecret, TeamVolume


class _TeamScoped:
    def get_fields(self):
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None and "team" in fields and not fields["team"].read_only:
            # Another team's is "unknown", exactly like one that does not exist.
            fields["team"].queryset = Team.objects.visible_to(request.user)
        return fields


class TeamVolumeSerializer(_TeamScoped, serializers.ModelSerializer):
    team = TeamSlugField(queryset=Team.objects.none())
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    size_gib = WholeNumberField(
        label_text=str(_("Size")), required=False, allow_null=True, min_value=1, max_value=MAX_VOLUME_GIB
    )
    source = serializers.ChoiceField(choices=VolumeSource.choices, default=VolumeSource.CREATED)
    access_mode = serializers.ChoiceField(choices=AccessMode.choices, required=False)

    class Meta:
        model = TeamVolume
        fields = [
            "id",
            "team",
            "name",
            "source",
            "size_gib",
            "access_mode",
            "storage_class",
            "read_only_for_researchers",
            "state",
            "state_reason",
            "state_changed_at",
            "capacity",
            "checked_at",
            "created_by",
            "created_at",
        ]
        read_only_fields = ["id", "state", "state_reason", "state_changed_at", "capacity", "checked_at", "created_at"]
        validators = []  # the unique (team, name) rule is checked once, in the service


class VolumeAccessSerializer(serializers.Serializer):
    read_only_for_researchers = serializers.BooleanField(
        help_text=_("Researchers' jobs mount the volume read-only, whatever they ask.")
    )


class TeamSecretSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    rotated_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = TeamSecret
        fields = [
            "id",
            "team",
            "name",
            "kind",
            "keys",
            "registry",
            "version",
            "created_by",
            "created_at",
            "rotated_by",
            "rotated_at",
        ]
        read_only_fields = fields


class SecretValuesSerializer(serializers.Serializer):
    """The values of a secret, write-only: `values` for a named secret, or `registry`, `username` and `password`
    for image pull credentials."""

    values = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=512 * 1024),
        required=False,
        write_only=True,
        help_text=_("Named secret: {KEY: value}. Never returned."),
    )
    registry = serializers.CharField(required=False, allow_blank=True, max_length=253)
    username = serializers.CharField(required=False, allow_blank=True, max_length=253, write_only=True)
    password = serializers.CharField(
        required=False, allow_blank=True, max_length=4096, write_only=True, trim_whitespace=False
    )


class NewSecretSerializer(_TeamScoped, SecretValuesSerializer):
    team = TeamSlugField(queryset=Team.objects.none())
    name = serializers.CharField(max_length=63)
    kind = serializers.ChoiceField(choices=SecretKind.choices)
