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


class JobMail(models.TextChoices):
    """When a job's submitter is e-mailed about it (jobs/notifications.py): a job holds a list of these (`Job.notify`),
    defaulting to the submitter's own list (`User.notify_default`). One mail per job and kind, whatever happens."""

    START = "start", _("when it starts running")
    END = "end", _("when it succeeds")
    FAIL = "fail", _("when it fails")

    @classmethod
    def ordered(cls, kinds) -> list[str]:
        """`kinds` once each, in the order above (how a job's and a user's lists are kept); unknown ones are the
        caller's to refuse (the model's field says which)."""
        given = set(kinds)
        return [kind for kind in cls.values if kind in given] + sorted(given - set(cls.values))
