from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from ..models import Alert


class AlertSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    job = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    subject = serializers.CharField(
        source="subject_in_words", read_only=True, help_text=_("What the alert is about, in the reader's language.")
    )
    summary = serializers.CharField(
        source="summary_in_words",
        read_only=True,
        help_text=_("The value against the rule, in the reader's language; `kind` and `subject_key` are the codes."),
    )

    class Meta:
        model = Alert
        fields = [
            "id", "kind", "state", "severity", "subject", "subject_key", "pool", "team", "job", "value",
            "peak_value", "threshold", "for_seconds", "summary", "active_since", "fired_at", "resolved_at",
            "last_evaluated_at",
        ]  # fmt: skip
        read_only_fields = fields
