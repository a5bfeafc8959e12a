from rest_framework import serializers

from ..models import Alert


class AlertSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    job = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = Alert
        fields = [
            "id", "kind", "state", "severity", "subject", "subject_key", "pool", "team", "job", "value",
            "peak_value", "threshold", "for_seconds", "summary", "active_since", "fired_at", "resolved_at",
            "last_evaluated_at",
        ]  # fmt: skip
        read_only_fields = fields
