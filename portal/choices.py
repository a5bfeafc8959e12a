from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    """A user's role in one team. Platform admins are users with `is_platform_admin`, across every team."""

    RESEARCHER = "researcher", _("Researcher")
    LEAD = "lead", _("Team lead")
