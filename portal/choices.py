from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    """A user's role in one team. Platform admins are users with `is_platform_admin`, across every team."""

    RESEARCHER = "researcher", _("Researcher")
    LEAD = "lead", _("Team lead")


class QueueingStrategy(models.TextChoices):
    """In which order a team's queued jobs are admitted (Kueue's queueing strategies, by their Kueue names)."""

    STRICT_FIFO = "StrictFIFO", _("Strict order: a job that does not fit yet holds back the jobs queued after it")
    BEST_EFFORT_FIFO = "BestEffortFIFO", _("Best effort: a later job that fits may start before an earlier one")


class MembershipSource(models.TextChoices):
    """Who made a membership: an admin by hand, or the identity provider's groups at sign-in (identity/)."""

    MANUAL = "manual", _("Set by hand")
    PROVIDER = "provider", _("From the identity provider")
