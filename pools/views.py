"""Pool pages: the dashboard of every pool and one pool in detail, both refreshing themselves with htmx."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.htmx import render_page_or_partial

from . import selectors
from .models import Pool

REFRESH_SECONDS = 10


@login_required
def pool_list(request):
    cards, key = selectors.pool_cards(request.user, other_label=_("another team"))
    context = {"cards": cards, "legend": key.legend, "refreshed_at": timezone.now(), "refresh": REFRESH_SECONDS}
    return render_page_or_partial(request, "pools/pool_list.html", "pools/partials/pool_cards.html", context)


@login_required
def pool_detail(request, slug: str):
    pool = get_object_or_404(Pool.objects.visible_to(request.user), slug=slug)
    cards, key = selectors.pool_cards(request.user, pools=[pool], other_label=_("another team"))
    context = {
        "pool": pool,
        "card": cards[0],
        "legend": key.legend,
        "refreshed_at": timezone.now(),
        "refresh": REFRESH_SECONDS,
    }
    return render_page_or_partial(request, "pools/pool_detail.html", "pools/partials/pool_occupancy.html", context)
