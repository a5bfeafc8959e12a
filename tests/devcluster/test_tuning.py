"""The control plane's two tunings (devcluster/tuning.py): what the devcluster runs, and the upstream defaults that
bench/admission.py --control-plane stock measures it against."""

from __future__ import annotations

import pytest
import yaml

from devcluster import build, kueue, launcher, tuning


def _kueue_config(tuning_name: str, tmp_path) -> dict:
    return kueue.configuration(
        health_port=1,
        metrics_port=2,
        webhook_port=3,
        cert_dir=tmp_path,
        pods_ready_timeout="5m",
        tuning=tuning.named(tuning_name),
    )


def test_stock_is_kueue_as_its_release_manifests_ship_it(tmp_path):
    shipped_path = build.kueue_module_dir() / "config/components/manager/controller_manager_config.yaml"
    if not shipped_path.exists():
        pytest.skip(f"Kueue's module is not in the cache ({shipped_path}): python -m devcluster build")
    shipped = yaml.safe_load(shipped_path.read_text())
    config = _kueue_config("stock", tmp_path)
    assert config["controller"]["groupKindConcurrency"] == shipped["controller"]["groupKindConcurrency"]
    assert config["clientConnection"] == shipped["clientConnection"]


def test_tuned_raises_only_what_its_comments_give_reasons_for(tmp_path):
    stock, tuned = _kueue_config("stock", tmp_path), _kueue_config("tuned", tmp_path)
    assert tuned["controller"]["groupKindConcurrency"] == {
        **stock["controller"]["groupKindConcurrency"],
        "Job.batch": 20,
    }
    assert tuned["clientConnection"] == {"qps": 500, "burst": 1000}
    # everything else is the same configuration
    assert {key: value for key, value in tuned.items() if key not in ("controller", "clientConnection")} == {
        key: value for key, value in stock.items() if key not in ("controller", "clientConnection")
    }


def test_a_cluster_runs_tuned_unless_told_and_writes_its_scheduler_client_rate(tmp_path):
    assert launcher.Cluster(tmp_path / "a").tuning is tuning.TUNED
    for name, rate in (("tuned", (500, 1000)), ("stock", (50, 100))):
        cluster = launcher.Cluster(tmp_path / name, tuning=name)
        cluster.state_dir.mkdir(parents=True)
        connection = yaml.safe_load(cluster._write_scheduler_config().read_text())["clientConnection"]
        assert (connection["qps"], connection["burst"]) == rate


def test_an_unknown_tuning_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match="unknown control-plane tuning 'fast': choose one of tuned, stock"):
        launcher.Cluster(tmp_path, tuning="fast")
