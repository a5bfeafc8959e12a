"""Money and quantities: exact rationals until the one rounding each invoice line gets.

Rounding rule (documented on every invoice): a line's amount is computed exactly — from the exact GPU-seconds,
the exact active fraction of the month and the unit price — and rounded once, to the cent, half up (0.005 → 0.01).
An invoice total is the sum of its rounded lines. Quantities are shown to six decimal places, rounded the same way,
but amounts are never computed from the rounded quantities.
"""

from decimal import Decimal
from fractions import Fraction

from django.utils.formats import number_format

from .periods import SECONDS_PER_HOUR

CENT_PLACES = 2
QUANTITY_PLACES = 6
UNIT_PRICE_PLACES = 4  # an hourly price, a lending price: as invoice lines keep them


def round_half_up(value: Fraction | Decimal | int, places: int) -> Decimal:
    """`value` rounded to `places` decimal places, halves away from zero, computed exactly."""
    scaled = Fraction(value) * 10**places
    sign = -1 if scaled < 0 else 1
    whole, remainder = divmod(abs(scaled.numerator), scaled.denominator)
    if 2 * remainder >= scaled.denominator:
        whole += 1
    return Decimal(sign * whole).scaleb(-places)


def to_cents(value: Fraction | Decimal | int) -> Decimal:
    return round_half_up(value, CENT_PLACES)


def hours(gpu_seconds: Decimal) -> Decimal:
    """GPU-seconds as GPU-hours, to six decimal places (half up)."""
    return round_half_up(Fraction(gpu_seconds) / Fraction(SECONDS_PER_HOUR), QUANTITY_PLACES)


def hourly_cost(gpu_seconds: Decimal, price_per_gpu_hour: Decimal) -> Decimal:
    """The cost of `gpu_seconds` at an hourly price, to the cent."""
    return to_cents(Fraction(gpu_seconds) * Fraction(price_per_gpu_hour) / Fraction(SECONDS_PER_HOUR))


def ratio(numerator: Decimal, denominator: Decimal, places: int = 4) -> Decimal | None:
    """numerator / denominator rounded half up, or None when the denominator is zero."""
    if not denominator:
        return None
    return round_half_up(Fraction(numerator) / Fraction(denominator), places)


def as_text(value: Fraction | Decimal | int | None, places: int = CENT_PLACES) -> str | None:
    """`value` as a plain decimal string to `places` places (half up), for JSON: "39200.00". What the API's
    DecimalFields give; a Decimal handed to a plain DRF `Response` would become a float, which money never is."""
    if value is None:
        return None
    return f"{round_half_up(value, places):f}"


def format_money(value: Decimal | None, places: int | None = CENT_PLACES) -> str:
    """Money as a reader of the active language reads it: thousands grouped (the language's separator, "," in both
    English and Chinese: portal/formats), `places` decimals (None: as many as the value has, e.g. a unit price
    to four places). No currency sign: prices carry none (PRODUCT.md, "the pools' currency")."""
    if value is None:
        return "—"
    if places is not None:
        value = round_half_up(value, places)  # number_format would cut the digits beyond `places`, not round them
    return number_format(value, decimal_pos=places, use_l10n=True, force_grouping=True)
