"""`manage.py reconcile_cluster`: bring the cluster to what the portal says now, at once — every team namespace
(with its ResourceQuota and LimitRange) and Kueue's objects. The same work the beat does every minute; `make dev`
runs it before the worker starts, so that the first jobs find their queues."""

from django.core.management.base import BaseCommand, CommandError

from cluster.errors import ClusterError
from portal.models import Team
from reconcile import kueue, namespaces


class Command(BaseCommand):
    help = "Reconcile every team namespace and Kueue's flavors, cluster queues and local queues now."

    def handle(self, *args, **options):
        failed = []
        for team in Team.objects.order_by("slug"):
            try:
                namespaces.reconcile(team)
            except ClusterError as error:
                failed.append(f"namespace of {team.slug}: {error}")
        try:
            outcome = kueue.reconcile()
        except ClusterError as error:
            failed.append(f"Kueue objects: {error}")
        else:
            self.stdout.write(f"reconcile_cluster: Kueue objects {kueue.summary(outcome)}")
        if failed:
            raise CommandError("; ".join(failed))
        self.stdout.write(self.style.SUCCESS("reconcile_cluster: the cluster holds what the portal says"))
