from django.db import models
from django.utils.translation import gettext_lazy as _


class PoolKind(models.TextChoices):
    RESERVED = "reserved", _("Reserved (monthly)")
    ELASTIC = "elastic", _("Elastic (spot / on-demand)")
    SHARED = "shared", _("Shared")


class TaintEffect(models.TextChoices):
    NO_SCHEDULE = "NoSchedule", "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule", "PreferNoSchedule"
    NO_EXECUTE = "NoExecute", "NoExecute"
