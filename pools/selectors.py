"""Reads about pools. Occupancy and fragmentation come with the cluster integration."""

from django.db.models import Count, Q, Sum
from django.utils import timezone

from .models import Pool, Reservation


def pool_summaries(user):
    """Every pool the user sees, with node counts, live GPU capacity and GPUs reserved right now."""
    now = timezone.now()
    pools = (
        Pool.objects.visible_to(user)
        .annotate(
            nodes_ready=Count("nodes", filter=Q(nodes__ready=True), distinct=True),
            nodes_not_ready=Count("nodes", filter=Q(nodes__ready=False), distinct=True),
            live_gpus=Sum("nodes__gpu_allocatable", filter=Q(nodes__ready=True)),
        )
        .order_by("name")
    )
    reserved = dict(
        Reservation.objects.active_at(now).values("pool").annotate(total=Sum("gpus")).values_list("pool", "total")
    )
    summaries = []
    for pool in pools:
        summaries.append(
            {
                "pool": pool,
                "nodes_ready": pool.nodes_ready,
                "nodes_not_ready": pool.nodes_not_ready,
                "live_gpus": pool.live_gpus or 0,
                "reserved_now": reserved.get(pool.id, 0),
            }
        )
    return summaries
