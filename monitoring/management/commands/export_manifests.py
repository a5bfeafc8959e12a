"""Write seed 003's operating artefacts from the portal's data into a directory (or one of them to stdout)."""

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from pools.models import Pool
from portal.models import Team

from ... import exports
from ...pdb_lint import WORKLOAD_KINDS, lint

ARTEFACTS = ("nodes", "namespaces", "autoscaler", "dcgm", "prometheus-rules", "prometheus-rules-file", "pdb-lint")


class Command(BaseCommand):
    help = (
        "Generate node label/taint commands per pool, each team's ResourceQuota and LimitRange, the Cluster "
        "Autoscaler node groups, the DCGM exporter DaemonSet and the alert rules (PrometheusRule), and lint "
        "PodDisruptionBudgets of workloads on pool nodes against their HPAs."
    )

    def add_arguments(self, parser):
        parser.add_argument("--output", "-o", type=Path, help="directory to write every artefact into")
        parser.add_argument("--only", choices=ARTEFACTS, help="print just this artefact to stdout")
        parser.add_argument(
            "--workloads",
            type=Path,
            action="append",
            default=[],
            help="YAML files with PDBs, HPAs and Deployments/StatefulSets to lint, as documents or the List of "
            "`kubectl get pdb,hpa,deploy -o yaml` (repeatable)",
        )
        parser.add_argument(
            "--from-cluster", action="store_true", help="lint the PDBs, HPAs and workloads of the portal's cluster"
        )

    def handle(self, *args, output=None, only=None, workloads=(), from_cluster=False, **options):
        if not output and not only:
            raise CommandError("say where: --output DIR, or --only ARTEFACT to print one")
        pools = list(Pool.objects.prefetch_related("nodes").order_by("slug"))
        findings_text = None
        if only in (None, "pdb-lint"):
            findings_text = self._lint(pools, workloads, from_cluster)
        artefacts = {
            "nodes": ("node-labels-and-taints.sh", lambda: exports.node_commands(pools)),
            "autoscaler": ("cluster-autoscaler.yaml", lambda: exports.autoscaler_config(pools)),
            "dcgm": ("dcgm-exporter.yaml", lambda: exports.dcgm_exporter(pools)),
            "prometheus-rules": ("prometheus-rule.yaml", lambda: exports.prometheus_rules()),
            "prometheus-rules-file": (
                "prometheus-rules.yml",
                lambda: exports.prometheus_rules(as_custom_resource=False),
            ),
            "pdb-lint": ("pdb-lint.txt", lambda: findings_text),
        }
        if only == "namespaces":
            self.stdout.write("\n---\n".join(exports.team_namespace(team) for team in Team.objects.order_by("slug")))
            return
        if only:
            self.stdout.write(artefacts[only][1](), ending="")
            return
        output.mkdir(parents=True, exist_ok=True)
        for filename, render in artefacts.values():
            (output / filename).write_text(render())
        namespaces = output / "namespaces"
        namespaces.mkdir(exist_ok=True)
        teams = list(Team.objects.order_by("slug"))
        for team in teams:
            (namespaces / f"{team.namespace}.yaml").write_text(exports.team_namespace(team))
        self.stdout.write(
            self.style.SUCCESS(f"wrote {len(artefacts)} artefacts and {len(teams)} team namespaces to {output}")
        )
        self.stdout.write(findings_text)

    def _lint(self, pools, files, from_cluster) -> str:
        pool_data = [{"slug": p.slug, "node_selector": p.node_selector, "taints": p.taints} for p in pools]
        objects = []
        for path in files:
            try:
                objects += _file_objects(path.read_text())
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
                raise CommandError(f"--workloads {path}: {error}") from None
        if from_cluster:
            objects += _cluster_objects()
        if not objects:
            return "PDB lint: nothing to lint (give --workloads FILE or --from-cluster)\n"
        by_kind = {"PodDisruptionBudget": [], "HorizontalPodAutoscaler": [], "workloads": []}
        skipped = []
        for item in objects:
            kind = item.get("kind")
            if kind in by_kind:
                by_kind[kind].append(item)
            elif kind in WORKLOAD_KINDS:
                by_kind["workloads"].append(item)
            else:
                skipped.append(str(kind or "(no kind)"))
        findings = lint(
            pdbs=by_kind["PodDisruptionBudget"],
            hpas=by_kind["HorizontalPodAutoscaler"],
            workloads=by_kind["workloads"],
            pools=pool_data,
        )
        lines = []
        if skipped:
            kinds = ", ".join(sorted(set(skipped)))
            lines.append(f"PDB lint: {len(skipped)} object(s) not linted, of a kind it does not know: {kinds}")
        if not findings:
            checked = len(by_kind["PodDisruptionBudget"])
            lines.append(f"PDB lint: {checked} PodDisruptionBudgets checked, none blocks scale-down")
        else:
            lines.append(f"PDB lint: {len(findings)} PodDisruptionBudget(s) block scale-down:")
            lines += [f"  - {finding.line()}" for finding in findings]
        return "\n".join(lines) + "\n"


def _file_objects(text: str) -> list[dict]:
    """The objects of a YAML file: each document, and each item of a list document (`kubectl get ... -o yaml`
    writes one `kind: List`; the API's typed lists, e.g. a PodDisruptionBudgetList, leave the kind off the items)."""
    objects = []
    for document in yaml.safe_load_all(text):
        if not isinstance(document, dict):
            continue
        kind = str(document.get("kind") or "")
        if not (kind.endswith("List") and isinstance(document.get("items"), list)):
            objects.append(document)
            continue
        item_kind = kind.removesuffix("List")
        for item in document["items"]:
            if isinstance(item, dict):
                objects.append(item if item.get("kind") or not item_kind else {"kind": item_kind, **item})
    return objects


def _cluster_objects() -> list[dict]:
    """PDBs, HPAs, Deployments and StatefulSets of every namespace, as plain dicts (read-only)."""
    from cluster.resources import list_scaling_objects

    return list_scaling_objects()
