from django.db import models
from django.utils.translation import gettext_lazy as _


class VolumeSource(models.TextChoices):
    EXISTING = "existing", _("an existing claim in the team namespace")
    CREATED = "created", _("a new claim the portal creates")


class AccessMode(models.TextChoices):
    """PersistentVolumeClaim access modes, by their Kubernetes names."""

    READ_WRITE_ONCE = "ReadWriteOnce", _("ReadWriteOnce: read-write from one node")
    READ_ONLY_MANY = "ReadOnlyMany", _("ReadOnlyMany: read-only from many nodes")
    READ_WRITE_MANY = "ReadWriteMany", _("ReadWriteMany: read-write from many nodes")
    READ_WRITE_ONCE_POD = "ReadWriteOncePod", _("ReadWriteOncePod: read-write from one pod")


class VolumeState(models.TextChoices):
    """What the cluster says of a team volume's claim (recorded by the `teamdata` tasks)."""

    PENDING = "pending", _("Pending")
    BOUND = "bound", _("Bound")
    LOST = "lost", _("Lost")
    FAILED = "failed", _("Failed")


# Every state may follow any other: the cluster decides (a claim binds, loses its volume, is deleted or comes back);
# the portal records each change with its time. Listed so that an unknown state can never be written.
VOLUME_TRANSITIONS = {state: set(VolumeState.values) - {state} for state in VolumeState.values}


class SecretKind(models.TextChoices):
    REGISTRY = "registry", _("Image pull credentials")
    OPAQUE = "opaque", _("Named secret (key/value pairs)")
