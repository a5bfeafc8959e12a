from django.db import models
from django.utils.translation import gettext_lazy as _


class InvoiceStatus(models.TextChoices):
    DRAFT = "draft", _("Draft (month open)")
    CLOSED = "closed", _("Closed")


class LineKind(models.TextChoices):
    RESERVATION_FEE = "reservation_fee", _("Reservation fee")
    OVERAGE = "overage", _("Overage")
    SPILL = "spill", _("Spill")
    ADJUSTMENT = "adjustment", _("Adjustment")
