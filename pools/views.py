"""Pool pages: the dashboard of every pool and one pool in detail, both refreshing themselves with htmx."""

import hashlib
from decimal import Decimal
from http import HTTPStatus

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.selectors import earned_this_month_by_team
from portal.htmx import render_page_or_partial

from . import selectors
from .models import Pool

REFRESH_SECONDS = 10


def _with_earned(cards) -> None:
    """What lending earned this month, beside each reservation on the cards whose team's bill the viewer sees (its
    leads and admins: the rows they may change); None for the others, which the card leaves out."""
    rows = [row for card in cards for row in card.lending]
    teams = {row.reservation.team_id for row in rows if row.can_change}
    earned = earned_this_month_by_team(teams, now=timezone.now()) if teams else {}
    for row in rows:
        key = (row.reservation.team_id, row.reservation.pool_id)
        row.earned = earned.get(key, {}).get("earned", Decimal("0.00")) if row.can_change else None


@login_required
def pool_list(request):
    """The dashboard. Its poll sends the version of the cards the browser shows (`since`): while the cards are the
    same (a digest of their markup, in the viewer's language) the answer is an empty 204, which htmx leaves alone;
    otherwise the whole fragment, gzip-compressed (about 20 KB on the wire at 1,000 nodes, bench/ui.py). So the
    markup says nothing that changes with the clock alone: a DCGM reading is named by its time, not its age."""
    cards, key = selectors.pool_cards(request.user, other_label=_("another team"))
    _with_earned(cards)
    body = render_to_string("pools/partials/pool_cards_body.html", {"cards": cards, "legend": key.legend}, request)
    version = hashlib.blake2b(body.encode(), digest_size=8).hexdigest()
    if request.htmx and request.GET.get("since") == version:
        return HttpResponse(status=HTTPStatus.NO_CONTENT)
    context = {"body": body, "version": version, "refreshed_at": timezone.now(), "refresh": REFRESH_SECONDS}
    return render_page_or_partial(request, "pools/pool_list.html", "pools/partials/pool_cards.html", context)


@login_required
def pool_detail(request, slug: str):
    pool = get_object_or_404(Pool.objects.visible_to(request.user), slug=slug)
    cards, key = selectors.pool_cards(request.user, pools=[pool], other_label=_("another team"))
    _with_earned(cards)
    context = {
        "pool": pool,
        "card": cards[0],
        "legend": key.legend,
        "refreshed_at": timezone.now(),
        "refresh": REFRESH_SECONDS,
    }
    return render_page_or_partial(request, "pools/pool_detail.html", "pools/partials/pool_occupancy.html", context)
