"""`manage.py export_manifests --workloads FILE` read YAML documents and treated each as one object; the file an
operator gets from `kubectl get pdb,hpa,deploy -n ai-prod -o yaml` is one `kind: List` document holding them in
`items`. Users saw "0 PodDisruptionBudgets checked, none blocks scale-down": a clean bill for a PDB that blocks
the pool's scale-down. A list's items are now linted one by one (a typed list's items take their kind from the
list), and objects of a kind the lint does not know are reported instead of passing silently."""

import io

import pytest
import yaml
from django.core.management import call_command

from tests.factories import PoolFactory
from tests.monitoring.test_exports import deployment, hpa, pdb


def _lint(path) -> str:
    out = io.StringIO()
    call_command("export_manifests", only="pdb-lint", workloads=[path], stdout=out)
    return out.getvalue()


@pytest.fixture
def inference_pool(db):
    return PoolFactory(slug="inference", node_selector={"node-role": "inference"},
                       taints=[{"key": "workload", "value": "inference", "effect": "NoSchedule"}])  # fmt: skip


def test_a_kubectl_list_file_is_linted_item_by_item(tmp_path, inference_pool):
    items = [pdb("llm-pdb", {"app": "llm"}, minAvailable=2), hpa("llm", 2), deployment("llm")]
    workloads = tmp_path / "from-kubectl.yaml"
    workloads.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}))
    # The same objects as separate documents are flagged (the positive control)...
    separate = tmp_path / "separate.yaml"
    separate.write_text(yaml.safe_dump_all(items))
    assert "llm-pdb" in _lint(separate)
    # ...and so must they be in kubectl's List.
    assert "llm-pdb" in _lint(workloads)


def test_typed_lists_give_their_items_a_kind_and_unknown_kinds_are_reported(tmp_path, inference_pool):
    def typed_list(kind, item):
        return {"apiVersion": "v1", "kind": f"{kind}List", "items": [{k: v for k, v in item.items() if k != "kind"}]}

    workloads = tmp_path / "typed.yaml"
    workloads.write_text(
        yaml.safe_dump_all(
            [
                typed_list("PodDisruptionBudget", pdb("llm-pdb", {"app": "llm"}, minAvailable=2)),
                typed_list("HorizontalPodAutoscaler", hpa("llm", 2)),
                typed_list("Deployment", deployment("llm")),
                {"kind": "Service", "metadata": {"name": "llm", "namespace": "ai-prod"}},
            ]
        )
    )
    text = _lint(workloads)
    assert "llm-pdb" in text
    assert "1 object(s) not linted, of a kind it does not know: Service" in text
