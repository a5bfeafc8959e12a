from rest_framework import serializers

from ..models import Pool


class PoolSerializer(serializers.ModelSerializer):
    spill_pools = serializers.SlugRelatedField(many=True, read_only=True, slug_field="slug")

    class Meta:
        model = Pool
        fields = [
            "id",
            "slug",
            "name",
            "kind",
            "gpu_model",
            "node_selector",
            "taints",
            "contracted_gpus",
            "monthly_price_per_gpu",
            "hourly_price_per_gpu",
            "min_nodes",
            "max_nodes",
            "spill_pools",
        ]
