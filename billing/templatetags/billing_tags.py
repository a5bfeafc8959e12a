"""`{{ amount|money }}` (to the cent) and `{{ unit_price|price }}` (its own decimals): billing.money.format_money."""

from django import template

from ..money import format_money

register = template.Library()


@register.filter
def money(value) -> str:
    return format_money(value)


@register.filter
def price(value) -> str:
    return format_money(value, places=None)
