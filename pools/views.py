from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from . import selectors
from .models import Pool


@login_required
def pool_list(request):
    return render(request, "pools/pool_list.html", {"summaries": selectors.pool_summaries(request.user)})


@login_required
def pool_detail(request, slug: str):
    pool = get_object_or_404(Pool.objects.visible_to(request.user), slug=slug)
    return render(request, "pools/pool_detail.html", {"pool": pool, "nodes": pool.nodes.order_by("name")})
