from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from ..models import Invoice, InvoiceLine


class UsageSerializer(serializers.Serializer):
    """Month figures of one team in one pool, from the daily rollups. GPU-hours; ratios between 0 and 1."""

    team = serializers.CharField()
    pool = serializers.CharField()
    pool_kind = serializers.CharField()
    month = serializers.CharField(help_text=_("YYYY-MM (UTC)"))
    reserved_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    in_reservation_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    overage_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    spill_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    idle_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    lent_gpu_hours = serializers.DecimalField(
        max_digits=20, decimal_places=6, help_text=_("Idle reserved GPU-hours lent to other teams (credited).")
    )
    borrowed_gpu_hours = serializers.DecimalField(
        max_digits=20, decimal_places=6, help_text=_("Overage GPU-hours borrowed from other teams' idle reservations.")
    )
    unreserved_gpu_hours = serializers.DecimalField(
        max_digits=20, decimal_places=6, help_text=_("Overage GPU-hours served by the pool's unreserved GPUs.")
    )
    lending_credit = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text=_("Lent GPU-hours × the pool's lending price.")
    )
    utilisation = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)
    spill_ratio = serializers.DecimalField(max_digits=10, decimal_places=4, allow_null=True)


class InvoiceLineSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    description = serializers.CharField(
        read_only=True, help_text=_("In English, as invoiced: the same for every reader.")
    )
    description_localised = serializers.CharField(
        source="description_in_words", read_only=True, help_text=_("The description in the reader's language.")
    )
    unit_localised = serializers.CharField(
        source="unit_label", read_only=True, help_text=_("The unit in the reader's language.")
    )

    class Meta:
        model = InvoiceLine
        fields = [
            "kind", "description", "description_localised", "pool", "quantity", "unit", "unit_localised",
            "unit_price", "amount", "adjusts_month",
        ]  # fmt: skip


class InvoiceSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    month = serializers.DateField(format="%Y-%m")
    lines = InvoiceLineSerializer(many=True, read_only=True)

    class Meta:
        model = Invoice
        fields = ["id", "team", "month", "status", "total", "metered_until", "closed_at", "lines"]


class BudgetSerializer(serializers.Serializer):
    monthly_cap = serializers.DecimalField(max_digits=14, decimal_places=2, min_value=0, allow_null=True)


class BudgetLiftSerializer(serializers.Serializer):
    job = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True)
