"""`manage.py export_manifests --workloads FILE` with a file that is missing, or that is not YAML, ended in a Python
traceback (FileNotFoundError / a YAML parser error) instead of a refusal naming the file, as every other command of
the portal gives. The control: a good file is linted."""

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.django_db


def test_a_missing_workloads_file_is_refused_with_a_message(tmp_path):
    missing = tmp_path / "pdbs.yaml"
    with pytest.raises(CommandError, match="pdbs.yaml"):
        call_command("export_manifests", only="pdb-lint", workloads=[Path(missing)])


def test_a_workloads_file_that_is_not_yaml_is_refused_with_a_message(tmp_path):
    broken = tmp_path / "pdbs.yaml"
    broken.write_text("kind: PodDisruptionBudget\nspec: [unclosed\n")
    with pytest.raises(CommandError, match="pdbs.yaml"):
        call_command("export_manifests", only="pdb-lint", workloads=[broken])


def test_control_a_good_workloads_file_is_linted(tmp_path, capsys):
    good = tmp_path / "pdbs.yaml"
    good.write_text("kind: PodDisruptionBudget\nmetadata: {name: web, namespace: ai}\nspec: {minAvailable: 1}\n")
    call_command("export_manifests", only="pdb-lint", workloads=[good])
    assert "1 PodDisruptionBudgets checked" in capsys.readouterr().out
