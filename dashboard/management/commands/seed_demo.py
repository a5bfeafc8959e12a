"""Load the demo: the pools of the two seed articles, three teams with a member of each role, reservations and
quotas. Idempotent: running it again changes nothing (it only creates what is missing and resets demo values)."""

from datetime import datetime
from decimal import Decimal

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from identity.models import GroupRule
from pools import services as pool_services
from pools.choices import PoolKind
from pools.models import NamespaceLimits, Pool, Quota, Reservation
from portal.choices import Role
from portal.models import Membership, Team, User

DEMO_PASSWORD = "reservoir-demo"  # noqa: S105 — printed on purpose: local demo logins only

# Seed 003: tiered pools isolated by labels and taints; seed 000: the reserved ("包月") A800 pool.
POOLS = [
    {
        "slug": "inference",
        "name": "Inference (T4)",
        "kind": PoolKind.SHARED,
        "gpu_model": "NVIDIA-T4",
        "node_selector": {"node-role": "inference", "gpu-type": "t4", "workload-tier": "online"},
        "taints": [{"key": "workload", "value": "inference", "effect": "NoSchedule"}],
        "contracted_gpus": None,
        "monthly_price_per_gpu": Decimal("0.00"),
        "hourly_price_per_gpu": Decimal("2.4000"),
        "min_nodes": 2,
        "max_nodes": 10,
        "gpus_per_node": 8,
    },
    {
        "slug": "training",
        "name": "Training (A100)",
        "kind": PoolKind.RESERVED,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "node_selector": {"node-role": "training", "gpu-type": "a100", "workload-tier": "offline"},
        "taints": [{"key": "workload", "value": "training", "effect": "NoSchedule"}],
        "contracted_gpus": 16,
        "monthly_price_per_gpu": Decimal("7200.00"),
        "hourly_price_per_gpu": Decimal("12.5000"),
        "min_nodes": 2,
        "max_nodes": 2,
    },
    {
        "slug": "elastic",
        "name": "Elastic spot (T4)",
        "kind": PoolKind.ELASTIC,
        "gpu_model": "NVIDIA-T4",
        "node_selector": {"node-role": "elastic", "gpu-type": "t4", "workload-tier": "elastic", "spot": "true"},
        "taints": [
            {"key": "workload", "value": "elastic", "effect": "NoSchedule"},
            {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
        ],
        "contracted_gpus": None,
        "monthly_price_per_gpu": Decimal("0.00"),
        "hourly_price_per_gpu": Decimal("1.1000"),
        "min_nodes": 0,
        "max_nodes": 20,
        "gpus_per_node": 8,
    },
    {
        "slug": "reserved-a800",
        "name": "Reserved A800 (monthly)",
        "kind": PoolKind.RESERVED,
        "gpu_model": "NVIDIA-A800-SXM4-80GB",
        "node_selector": {"scheduling.eks.ebcloud.com/node-pool": "reserved", "gpu-type": "a800"},
        "taints": [{"key": "workload", "value": "reserved", "effect": "NoSchedule"}],
        "contracted_gpus": 32,
        "monthly_price_per_gpu": Decimal("9800.00"),
        "hourly_price_per_gpu": Decimal("18.0000"),
        "min_nodes": 4,
        "max_nodes": 4,
    },
]
SPILL = {"training": ["elastic"], "reserved-a800": ["elastic"]}

TEAMS = [
    {"slug": "llm", "name": "LLM Pretraining", "container_max_gpus": 8},
    {"slug": "vision", "name": "Vision", "container_max_gpus": 8},
    {"slug": "speech", "name": "Speech", "container_max_gpus": 2},
]
# team -> pool -> (reserved GPUs, quota GPUs)
ALLOCATIONS = {
    "llm": {"reserved-a800": (16, 20), "elastic": (0, 8)},
    "vision": {"reserved-a800": (8, 8), "training": (8, 8), "elastic": (0, 4), "inference": (0, 4)},
    "speech": {"training": (4, 6), "inference": (0, 8), "elastic": (0, 4)},
}
RESERVATION_MONTHS = 3


def first_of_month(moment: datetime) -> datetime:
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def add_months(moment: datetime, months: int) -> datetime:
    month_index = moment.month - 1 + months
    return moment.replace(year=moment.year + month_index // 12, month=month_index % 12 + 1)


class Command(BaseCommand):
    help = "Create the demo pools, teams, users, reservations and quotas (idempotent) and print the logins."

    @transaction.atomic
    def handle(self, *args, **options):
        pools = self._pools()
        admin = self._user("admin", "Ada", platform_admin=True)
        logins = [("admin", "platform admin", "every team (break-glass)")]
        for spec in TEAMS:
            team, _ = Team.objects.update_or_create(slug=spec["slug"], defaults={"name": spec["name"]})
            for role, suffix, first_name in ((Role.LEAD, "lead", "Lee"), (Role.RESEARCHER, "researcher", "Rui")):
                user = self._user(f"{team.slug}-{suffix}", first_name)
                Membership.objects.update_or_create(user=user, team=team, defaults={"role": role})
                logins.append((user.username, Role(role).label.lower(), team.name))
            if not NamespaceLimits.objects.filter(team=team).exists():
                pool_services.set_namespace_limits(team=team, container_max_gpus=spec["container_max_gpus"])
            self._allocations(team, pools, admin)
        # The demo provider's groups (devcluster/hydra.py): gpu-<team>-leads and gpu-<team> give the team's lead and
        # researcher roles, gpu-admins platform admin. The local admin is the break-glass account.
        for spec in TEAMS:
            team = Team.objects.get(slug=spec["slug"])
            GroupRule.objects.get_or_create(group=f"gpu-{team.slug}-leads", team=team, defaults={"role": Role.LEAD})
            GroupRule.objects.get_or_create(group=f"gpu-{team.slug}", team=team, defaults={"role": Role.RESEARCHER})
        GroupRule.objects.get_or_create(group="gpu-admins", platform_admin=True)
        User.objects.filter(pk=admin.pk).update(is_break_glass=True)
        # The admin is also a researcher of the first team, to show that a user may belong to several teams.
        Membership.objects.get_or_create(
            user=admin, team=Team.objects.get(slug=TEAMS[0]["slug"]), defaults={"role": Role.RESEARCHER}
        )

        self.stdout.write(self.style.SUCCESS(f"Demo data ready: {len(pools)} pools, {len(TEAMS)} teams."))
        self.stdout.write(f"Logins (password for all: {DEMO_PASSWORD}):")
        for username, role, scope in logins:
            self.stdout.write(f"  {username:<20} {role:<16} {scope}")

    def _pools(self) -> dict[str, Pool]:
        pools = {}
        for spec in POOLS:
            values = {key: value for key, value in spec.items() if key != "slug"}
            pool, _ = Pool.objects.update_or_create(slug=spec["slug"], defaults=values)
            pool.full_clean()
            pools[pool.slug] = pool
        for slug, targets in SPILL.items():
            pools[slug].spill_pools.set([pools[target] for target in targets])
        return pools

    def _user(self, username: str, first_name: str, *, platform_admin: bool = False) -> User:
        user, created = User.objects.get_or_create(
            username=username,
            defaults={"first_name": first_name, "email": f"{username}@example.com"},
        )
        if created:
            user.set_password(DEMO_PASSWORD)
        user.is_platform_admin = platform_admin
        user.is_staff = platform_admin
        user.is_superuser = platform_admin
        user.save()
        return user

    def _allocations(self, team: Team, pools: dict[str, Pool], admin: User) -> None:
        starts_at = first_of_month(timezone.now())
        for slug, (reserved, quota) in ALLOCATIONS[team.slug].items():
            pool = pools[slug]
            if reserved and not Reservation.objects.filter(team=team, pool=pool).exists():
                pool_services.create_reservation(
                    team=team,
                    pool=pool,
                    gpus=reserved,
                    starts_at=starts_at,
                    ends_at=add_months(starts_at, RESERVATION_MONTHS),
                    user=admin,
                )
            current = Quota.objects.filter(team=team, pool=pool).values_list("max_gpus", flat=True).first()
            if current != quota:
                pool_services.set_quota(team=team, pool=pool, max_gpus=quota, user=admin)
