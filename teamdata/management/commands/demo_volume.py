"""Register the demo team volume: `llm`'s `datasets`, a 100 GiB ReadOnlyMany claim of the local cluster's
`local-data` class. devcluster/topologies/demo.yaml makes that class's volumes ahead of time and assigns each to a
demo team (label `reservoir.io/team`): the claim binds one of llm's, never another team's. Idempotent: a volume
already registered is left as it is. The worker creates the claim (teamdata.ensure_volume)."""

from django.core.management.base import BaseCommand

from portal.models import Team, User
from teamdata import services
from teamdata.choices import AccessMode, VolumeSource
from teamdata.models import TeamVolume


class Command(BaseCommand):
    help = "Register a demo team volume (llm/datasets on the local-data storage class); idempotent."

    def handle(self, *args, **options):
        team = Team.objects.filter(slug="llm").first()
        admin = User.objects.filter(username="admin").first()
        if team is None or admin is None:
            self.stdout.write("no demo team llm (run seed_demo first): nothing registered")
            return
        if TeamVolume.objects.filter(team=team, name="datasets").exists():
            self.stdout.write("demo volume llm/datasets already registered")
            return
        services.register_volume(
            team=team,
            user=admin,
            name="datasets",
            source=VolumeSource.CREATED,
            size_gib=100,
            access_mode=AccessMode.READ_ONLY_MANY,
            storage_class="local-data",
        )
        self.stdout.write(self.style.SUCCESS("demo volume llm/datasets registered (100 GiB, ReadOnlyMany, local-data)"))
