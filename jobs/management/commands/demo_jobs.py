"""`manage.py demo_jobs`: a few jobs for the demo, so that `make dev` shows busy pools, a queue and usage.

Only on an empty job table (running it again does nothing) — or, with `--new-cluster` (what `make dev` passes),
also when no job was submitted since the cluster's storage began: the local cluster starts empty on every `make
dev`, and the jobs of the run before fail as deleted from it. Only through the submission service, exactly as a
researcher's browser would. The jobs "run" for the time in KWOK's pod annotation (the local cluster's fake
nodes honour it; a real cluster ignores the annotation and runs the image)."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand

from jobs import services
from jobs.choices import Placement, Priority
from jobs.models import Job
from jobs.specs import JobSpec
from pools.models import Pool
from portal.models import Team, User

RUN_TIME = "pod-complete.stage.kwok.x-k8s.io/delay"

# team, user, pool, name, GPUs, run time, extra spec fields
DEMO = [
    ("llm", "llm-researcher", "reserved-a800", "llama-pretrain-shard-a", 8, "3h", {}),
    ("llm", "llm-researcher", "reserved-a800", "llama-pretrain-shard-b", 8, "3h", {}),
    ("llm", "llm-lead", "reserved-a800", "llama-eval-sweep", 2, "45m", {"priority": Priority.HIGH}),
    ("llm", "llm-researcher", "reserved-a800", "llama-pretrain-shard-c", 8, "2h", {}),  # over quota: queued
    ("vision", "vision-researcher", "training", "vit-finetune", 8, "90m", {}),
    ("vision", "vision-researcher", "reserved-a800", "detector-train", 4, "1h", {"placement": Placement.SOFT}),
    ("speech", "speech-researcher", "training", "asr-conformer", 2, "2h", {}),
    ("speech", "speech-researcher", "inference", "tts-batch-synthesis", 2, "30m", {}),
    ("vision", "vision-lead", "elastic", "augment-dataset", 1, "20m", {}),
]


class Command(BaseCommand):
    help = "Submit a handful of demo jobs when there are none yet."

    def add_arguments(self, parser):
        parser.add_argument(
            "--new-cluster",
            action="store_true",
            help="Also submit them when no job was submitted since the cluster began (a fresh local cluster).",
        )

    def handle(self, *args, new_cluster: bool = False, **options):
        jobs = Job.objects.all()
        if new_cluster:
            from cluster import resources
            from cluster.errors import ClusterError

            try:
                jobs = jobs.filter(created_at__gte=resources.cluster_born_at())
            except ClusterError as error:
                self.stderr.write(f"demo_jobs: cannot tell when the cluster began ({error}); nothing submitted")
                return
        if jobs.exists():
            self.stdout.write("demo_jobs: jobs exist already; nothing submitted")
            return
        submitted = 0
        for team_slug, username, pool_slug, name, gpus, runs_for, extra in DEMO:
            spec = JobSpec(
                name=name,
                image=f"registry.example.com/{team_slug}/{name}:1.0",
                gpus=gpus,
                command=["python", "train.py"],
                cpu_millicores=4000,
                memory_mib=16 * 1024,
                pod_annotations={RUN_TIME: runs_for},
                **extra,
            )
            try:
                job = services.submit_job(
                    team=Team.objects.get(slug=team_slug),
                    pool=Pool.objects.get(slug=pool_slug),
                    user=User.objects.get(username=username),
                    spec=spec,
                )
            except ValidationError as error:
                self.stderr.write(f"  {name}: not submitted: {' '.join(error.messages)}")
                continue
            submitted += 1
            self.stdout.write(f"  #{job.pk} {name}: {job.get_state_display()}")
        self.stdout.write(self.style.SUCCESS(f"demo_jobs: {submitted} jobs submitted"))
