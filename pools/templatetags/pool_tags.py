"""The per-node strip of GPU slots, built in Python: a dashboard of 1,000 nodes renders 8,000 slots, too many
for a template loop to place quickly. One `<i>` per GPU slot, coloured by the team that holds it; the strip's
title and aria-label say in words who holds what, so each slot needs no text of its own."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

register = template.Library()


def _slot_class(segment) -> str:
    if segment.kind == "team":
        return f"slot team-{segment.colour}"
    return f"slot {segment.kind}"


@register.simple_tag
def gpu_strip(node):
    """`node` is a pools.selectors.NodeStrip: its slots, and a text alternative that says the same."""
    parts = []
    for segment in node.segments:
        if segment.kind in ("team", "other"):
            parts.append(
                ngettext("%(who)s: %(n)d GPU", "%(who)s: %(n)d GPUs", segment.gpus)
                % {
                    "who": segment.label,
                    "n": segment.gpus,
                }
            )
    if node.schedulable:
        parts.append(ngettext("%(n)d GPU free", "%(n)d GPUs free", node.free) % {"n": node.free})
    else:
        parts.append(_("not schedulable (NotReady or cordoned)"))
    description = f"{node.name}: " + "; ".join(parts)
    slots = mark_safe(  # noqa: S308 - each piece below is escaped by format_html
        "".join(
            str(format_html('<i class="{}"></i>', _slot_class(segment))) * segment.gpus for segment in node.segments
        )
    )
    state = "" if node.schedulable else " down"
    return format_html(
        '<div class="strip{}" role="img" aria-label="{}" title="{}"><span class="node-name">{}</span>'
        '<span class="slots">{}</span></div>',
        state,
        description,
        description,
        node.name,
        slots,
    )
