# The index of a team's finished jobs carries what a run's fraction of its maximum run time needs, so the history
# start-time quotes are fitted on is read from the index alone. Built and dropped concurrently: a jobs table in use
# is not locked against writes meanwhile.

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0017_jobevent_evicted_index"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["team", "-finished_at"],
                include=("started_at", "max_run_minutes", "state"),
                name="jobs_job_team_finished_runs",
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="jobs_job_team_finished"),
    ]
