"""The prices each day's usage is billed at: a pool's hourly price and lending share as they were that UTC day
(`PriceChange`), so that a change of price never re-prices what was used before it.

A month's usage of a pool whose prices changed within it is summed per stretch of days with one price (`Price`), and
each stretch is priced and rounded on its own, as its own invoice line."""

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from django.db.models import Case, IntegerField, Value, When

from pools.models import Pool, PriceChange, lending_price

from .models import FIGURE_SUMS
from .periods import next_month


@dataclass(frozen=True)
class Price:
    """A pool's prices from the day `first` on (within the days asked for), until the next `Price` of its list."""

    first: date
    hourly: Decimal
    lending_share: Decimal

    @property
    def lending(self) -> Decimal:
        return lending_price(self.hourly, self.lending_share)


def price_spans(pools, first: date, last: date) -> dict[int, list[Price]]:
    """Per pool of `pools`, its prices over the days from `first` to `last` (both included), oldest first: the first
    starts on `first`, each later one on the day its change took effect (a change that keeps the prices before it
    starts none)."""
    changes: dict[int, dict[date, PriceChange]] = {}
    rows = PriceChange.objects.filter(pool__in=[pool.pk for pool in pools], effective_from__lte=last)
    for change in rows.order_by("effective_from", "id"):  # of one day's changes, the last written wins
        changes.setdefault(change.pool_id, {})[change.effective_from] = change
    spans: dict[int, list[Price]] = {}
    for pool in pools:
        steps = sorted(changes.get(pool.pk, {}).items())
        if not steps:
            spans[pool.pk] = [Price(first, pool.hourly_price_per_gpu, pool.lending_price_share)]
            continue
        before = [change for day, change in steps if day <= first]
        at_first = before[-1] if before else steps[0][1]
        prices = [Price(first, at_first.hourly_price_per_gpu, at_first.lending_price_share)]
        for day, change in steps:
            if first < day and (change.hourly_price_per_gpu, change.lending_price_share) != (
                prices[-1].hourly,
                prices[-1].lending_share,
            ):
                prices.append(Price(day, change.hourly_price_per_gpu, change.lending_price_share))
        spans[pool.pk] = prices
    return spans


def price_on(spans: list[Price], day: date) -> Price:
    """The prices of `day` among one pool's `spans` (a day before the first gets the first)."""
    found = spans[0]
    for price in spans:
        if price.first <= day:
            found = price
    return found


def month_sums_priced(rollups, month: date, *, by=("team_id", "pool_id")) -> list[dict]:
    """`DailyUsageQuerySet.month_sums` of `rollups` (`by` names `pool_id`), each group split by the stretches of days
    with one price: every row has its `price` (a `Price`) and `span` (0 for the month's first prices)."""
    last = next_month(month) - timedelta(days=1)
    in_month = rollups.filter(day__gte=month, day__lte=last)
    pools = Pool.objects.in_bulk(set(in_month.values_list("pool_id", flat=True).distinct()))
    spans = price_spans(pools.values(), month, last)
    later = [
        When(pool_id=pool_id, day__gte=price.first, then=Value(index))
        for pool_id, prices in spans.items()
        for index, price in reversed(list(enumerate(prices)))
        if index
    ]
    span = Case(*later, default=Value(0), output_field=IntegerField()) if later else Value(0, IntegerField())
    rows = in_month.annotate(span=span).values(*by, "span").annotate(**FIGURE_SUMS).order_by(*by, "span")
    return [{**row, "price": spans[row["pool_id"]][row["span"]]} for row in rows]
