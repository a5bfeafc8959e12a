"""factory_boy factories for the domain models."""

from datetime import timedelta
from decimal import Decimal

import factory
from django.utils import timezone

from billing import usage
from jobs.models import Job
from pools.choices import PoolKind
from pools.models import Node, Pool, Quota, Reservation
from portal.choices import Role
from portal.models import Membership, Team, User


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.com")
    password = factory.django.Password("pw-for-tests")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.Sequence(lambda n: f"Team {n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Role.RESEARCHER


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool

    slug = factory.Sequence(lambda n: f"pool-{n}")
    name = factory.Sequence(lambda n: f"Pool {n}")
    kind = PoolKind.RESERVED
    gpu_model = "NVIDIA-A800-SXM4-80GB"
    node_selector = factory.LazyAttribute(lambda o: {"node-role": o.slug})
    taints = factory.LazyAttribute(lambda o: [{"key": "workload", "value": o.slug, "effect": "NoSchedule"}])
    contracted_gpus = 16
    monthly_price_per_gpu = Decimal("9800.00")
    hourly_price_per_gpu = Decimal("18.0000")
    min_nodes = 0
    max_nodes = 4


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    pool = factory.SubFactory(PoolFactory)
    labels = factory.LazyAttribute(lambda o: dict(o.pool.node_selector) if o.pool else {})
    gpu_capacity = 8
    gpu_allocatable = 8
    ready = True


class ReservationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Reservation

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(PoolFactory)
    gpus = 4
    starts_at = factory.LazyFunction(lambda: timezone.now() - timedelta(days=1))
    ends_at = factory.LazyAttribute(lambda o: o.starts_at + timedelta(days=30))
    monthly_price_per_gpu = Decimal("9800.00")


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(PoolFactory)
    max_gpus = 8


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(PoolFactory)
    submitted_by = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    image = "registry.example.com/train:1.0"
    command = ["python", "train.py"]
    gpus = 1


class PodFactory(factory.django.DjangoModelFactory):
    """A pod as the sync records it; by default a GPU pod the scheduler has not placed yet (give `pending_reason`)."""

    class Meta:
        model = "jobs.Pod"

    uid = factory.Sequence(lambda n: f"pod-uid-{n}")
    namespace = factory.LazyAttribute(lambda o: o.team.namespace if o.team else "team-x")
    name = factory.Sequence(lambda n: f"rsv-pod-{n}")
    team = None
    pool = None
    gpus = 1
    phase = "Pending"
    scheduled = False
    created_at = "2026-01-01T00:00:00Z"


# --- billing ---------------------------------------------------------------------------------------------------


class UsageIntervalFactory(factory.django.DjangoModelFactory):
    """A GPU pod's stay on a node; give `started_at` and `ended_at` (None = still running) explicitly in tests.
    Written through the service, as every interval is."""

    class Meta:
        model = "billing.UsageInterval"

    pod_uid = factory.Sequence(lambda n: f"00000000-0000-4000-8000-{n:012d}")
    team = factory.SubFactory(TeamFactory)
    pool = factory.SubFactory(PoolFactory)
    namespace = factory.LazyAttribute(lambda o: o.team.namespace if o.team else "kube-system")
    pod_name = factory.Sequence(lambda n: f"pod-{n}")
    node_name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    gpus = 1
    started_at = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=1))
    ended_at = None

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        """Recorded as the sync records a pod (`billing.usage.record_usage`): the days it covers are marked stale."""
        interval = model_class(*args, **kwargs)
        written = usage.record_usage(intervals=[interval])
        assert written == 1, f"pod {interval.pod_uid} already has a closed interval"
        return interval
