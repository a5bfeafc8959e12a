from django.db import models
from django.utils.translation import gettext_lazy as _


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", _("Draft (month open)")
    CLOSED = "closed", _("Closed")


class LineKind(models.TextChoices):
    RESERVATION_FEE = "reservation_fee", _("Reservation fee")
    OVERAGE = "overage", _("Overage")
    SPILL = "spill", _("Spill")
    LENDING_CREDIT = "lending_credit", _("Lending credit")
    ADJUSTMENT = "adjustment", _("Adjustment")


class LineUnit(models.TextChoices):
    """The unit of an invoice line: the value is stored (and exported) as it is, the label is shown."""

    GPU_HOURS = "GPU-hours", _("GPU-hours")
    GPU_MONTHS = "GPU-months", _("GPU-months")


def unit_label(unit: str) -> str:
    """A stored unit in the active language (a unit the portal no longer knows: as stored)."""
    return str(dict(LineUnit.choices).get(unit, unit))
