"""A start-time quote in words, in the reader's language: when (`quote_in_words`) and why (`basis_in_words`, from the
basis items `jobs.quote` writes)."""

from dataclasses import dataclass
from datetime import datetime

from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from . import reasons
from .quote import Quote


def moment_in_words(moment: datetime, *, now: datetime | None = None) -> str:
    """A time as a reader reads it: the hour and minute today, the date too on another day."""
    now = timezone.localtime(now or timezone.now())
    local = timezone.localtime(moment)
    if local.date() == now.date():
        return formats.time_format(local, "H:i")
    return formats.date_format(local, "SHORT_DATETIME_FORMAT")


def _basis_item(item: dict, now: datetime) -> str:
    say = item["say"]
    if say == "ahead":
        return (
            ngettext(
                "%(jobs)d job ahead of you in your team's queue, %(gpus)d GPUs",
                "%(jobs)d jobs ahead of you in your team's queue, %(gpus)d GPUs",
                item["jobs"],
            )
            % item
        )
    if say == "room":
        return _("your team has room for %(gpus)d more GPUs in %(pool)s now") % item
    if say == "preempts":
        return (
            ngettext(
                "Kueue stops %(jobs)d lower-priority job of your team for it, %(gpus)d GPUs",
                "Kueue stops %(jobs)d lower-priority jobs of your team for it, %(gpus)d GPUs",
                item["jobs"],
            )
            % item
        )
    if say == "freed":
        latest = moment_in_words(datetime.fromisoformat(item["latest"]), now=now)
        return _("your team's running jobs free %(gpus)d GPUs by %(latest)s %(zone)s at the latest") % {
            "gpus": item["gpus"],
            "latest": latest,
            "zone": timezone.get_current_timezone_name(),
        }
    if say == "reclaim":
        return _("%(gpus)d borrowed GPUs of your reservation return within %(seconds)d s") % item
    if say == "history":
        if not item["jobs"]:
            return _("your team has few finished jobs yet, so any run may last up to its maximum run time")
        return (
            ngettext(
                "run times fitted on your team's %(jobs)d finished job",
                "run times fitted on your team's %(jobs)d finished jobs",
                item["jobs"],
            )
            % item
        )
    if say == "unmeasured":
        return _("no start measured on this platform yet: Running within %(seconds)d s") % item
    if say == "unplaced":
        return _("Kueue has admitted it, but the scheduler finds no node for its pods: %(reason)s") % {
            "reason": reasons.plain_reason(item.get("message", ""))
        }
    if say == "admitted":
        return _("Kueue has admitted it: it starts as soon as its pods are placed on nodes")
    if say == "spills":
        return _("in %(pool)s, a spill pool") % item
    if say == "others":
        text = _("other teams' jobs hold GPUs of %(pool)s your team may use: they return as those jobs end (no time)")
        return text % item
    if say == "never":
        return _("it needs %(gpus)d GPUs, more than your team can ever hold in %(pool)s") % item
    return ""


def basis_in_words(basis: list[dict], *, now: datetime | None = None) -> str:
    """The basis of a quote in the active language: its items joined into one sentence."""
    now = now or timezone.now()
    return "; ".join(part for part in (_basis_item(item, now) for item in basis) if part)


def quote_in_words(quote: Quote, *, now: datetime | None = None) -> str:
    """ "Starts now", "likely 14:20 UTC (80 %: 13:55–15:10)" (times in the portal's zone, named once), or that it
    cannot start with the team's quota."""
    now = now or timezone.now()
    if quote.unplaced:
        return _("waits for a node")
    if quote.waits_for_others:
        return _("waits for GPUs other teams borrow")
    if quote.never:
        return _("cannot start with your team's quota")
    if quote.starts_now:
        return _("starts now")
    return _("likely %(estimate)s %(zone)s (80 %%: %(low)s–%(high)s)") % {
        "estimate": moment_in_words(quote.estimate, now=now),
        "zone": timezone.get_current_timezone_name(),
        "low": moment_in_words(quote.low, now=now),
        "high": moment_in_words(quote.high, now=now),
    }


@dataclass(frozen=True)
class QuoteWords:
    """A quote as pages and the API show it, in the active language."""

    text: str
    basis: str
    starts_now: bool
    never: bool
    unplaced: bool
    waits_for_others: bool
    estimate: datetime | None
    low: datetime | None
    high: datetime | None


def worded(quote: Quote, *, now: datetime | None = None) -> QuoteWords:
    now = now or timezone.now()
    return QuoteWords(
        text=quote_in_words(quote, now=now),
        basis=basis_in_words(quote.basis, now=now),
        starts_now=quote.starts_now,
        never=quote.never,
        unplaced=quote.unplaced,
        waits_for_others=quote.waits_for_others,
        estimate=quote.estimate,
        low=quote.low,
        high=quote.high,
    )
