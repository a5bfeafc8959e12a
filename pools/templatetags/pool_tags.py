"""The per-node strips of GPU slots, built in Python: a dashboard of 1,000 nodes renders 8,000 slots, too many
for a template loop to place quickly. One `<i>` per GPU slot, coloured by the team that holds it; each strip's
title and aria-label say in words who holds what, so a slot needs no text of its own. And the time of a card's
DCGM reading, which the card names without saying how old it is (see `reading_time`)."""

from django import template
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

register = template.Library()
_SLOTS: dict[str, str] = {}


def _slot(segment) -> str:
    """The markup of one slot of `segment` (class names are constants of this module: nothing to escape)."""
    css = f"slot team-{segment.colour}" if segment.kind == "team" else f"slot {segment.kind}"
    if css not in _SLOTS:
        _SLOTS[css] = f'<i class="{css}"></i>'
    return _SLOTS[css]


def describe(node, texts: dict | None = None) -> str:
    """`node` in words. `texts` memoises the translated phrases across the nodes of one page (they repeat)."""
    texts = {} if texts is None else texts
    parts = []
    for segment in node.segments:
        if segment.kind in ("team", "other"):
            key = (segment.label, segment.gpus)
            if key not in texts:
                texts[key] = ngettext("%(who)s: %(n)d GPU", "%(who)s: %(n)d GPUs", segment.gpus) % {
                    "who": segment.label,
                    "n": segment.gpus,
                }
            parts.append(texts[key])
    key = ("", node.free if node.schedulable else -1)
    if key not in texts:
        texts[key] = (
            ngettext("%(n)d GPU free", "%(n)d GPUs free", node.free) % {"n": node.free}
            if node.schedulable
            else _("not schedulable (NotReady or cordoned)")
        )
    parts.append(texts[key])
    return f"{node.name}: " + "; ".join(parts)


def strip_html(node, texts: dict | None = None) -> str:
    description = escape(describe(node, texts))
    slots = "".join(_slot(segment) * segment.gpus for segment in node.segments)
    state = "" if node.schedulable else " down"
    return (
        f'<div class="strip{state}" role="img" aria-label="{description}" title="{description}">'
        f'<span class="node-name">{escape(node.name)}</span><span class="slots">{slots}</span></div>'
    )


@register.simple_tag
def gpu_strip(node):
    """One node's strip (`node` is a pools.selectors.NodeStrip)."""
    return mark_safe(strip_html(node))  # noqa: S308 - every text in it is escaped above


@register.simple_tag
def gpu_strips(nodes):
    """The strips of many nodes at once (one tag call instead of one per node)."""
    texts: dict = {}
    return mark_safe("".join(strip_html(node, texts) for node in nodes))  # noqa: S308 - every text in it is escaped above


@register.filter
def reading_time(at):
    """`at` as a `<time data-age>` whose text is the moment itself ("14:30:05 UTC", the full date in its title), not
    its age: the markup stays the same until a new reading arrives, so the dashboard's version (a digest of the cards'
    markup) does not change at every poll. static/js/reservoir.js shows it as an age in the page's language."""
    at = timezone.localtime(at)
    return format_html(
        '<time datetime="{}" title="{} UTC" data-age>{} UTC</time>',
        at.replace(microsecond=0).isoformat(),
        date_format(at, "DATETIME_FORMAT"),
        date_format(at, "H:i:s"),
    )
