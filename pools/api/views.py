from rest_framework import viewsets

from ..models import Pool
from .serializers import PoolSerializer


class PoolViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PoolSerializer
    lookup_field = "slug"
    ordering_fields = ["name", "slug", "kind"]

    def get_queryset(self):
        return Pool.objects.visible_to(self.request.user).prefetch_related("spill_pools").order_by("name")
