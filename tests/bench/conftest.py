"""What the benchmark smoke tests share: the environment each benchmark runs in (its databases named after
DATABASE_URL's, a Redis of its own) and the cluster the cluster benchmarks share."""

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from bench.benchdb import DEFAULT_URL
from devcluster import launcher
from tests.bench.smoke import SMOKE_STATE_DIR, run_benchmark
from tests.faultkit import ThrowawayRedis


@pytest.fixture(scope="session")
def bench_env(tmp_path_factory):
    """The benchmarks' environment: this one without the tests' Django settings (each benchmark picks its own) or
    KUBECONFIG (each runs on a local cluster it names), a Redis server of their own (REDIS_URL and the API
    benchmark's BENCH_REDIS_URL), since they purge the queues they use, and databases of their own: DATABASE_URL's
    name with `_smoke` after it, so that a benchmark's smoke run (`<name>_smoke_<suffix>`, bench/benchdb.py) never
    drops the database a measured run by hand left behind to be read (`<name>_<suffix>`)."""
    redis = ThrowawayRedis(tmp_path_factory.mktemp("bench-redis"))
    redis.start()
    env = {key: value for key, value in os.environ.items() if key not in ("DJANGO_SETTINGS_MODULE", "KUBECONFIG")}
    parts = urlsplit(os.environ.get("DATABASE_URL", DEFAULT_URL))
    smoke_url = urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}_smoke"))
    env.update(REDIS_URL=redis.url, BENCH_REDIS_URL=redis.url, DATABASE_URL=smoke_url)
    yield env
    redis.stop()


@pytest.fixture(scope="module")
def bench_cluster(bench_env):
    """bench/cluster_up.py's smoke run, which starts the cluster the other cluster benchmarks then run on (their
    --shared-cluster) and leaves it up; its summary is this fixture's value.

    Stopped after the module's tests — in CI as the tests' own cluster is (devcluster/pytest_plugin.py), and on a
    developer's machine too, unlike that one: the next run starts it afresh anyway (cluster_up measures a start), and
    an idle cluster would take CPU from the rest of the suite. RESERVOIR_BENCH_KEEP_CLUSTER=1 leaves it up (outside
    CI) to look at it or run a benchmark on it by hand (--shared-cluster --state-dir .state/devcluster-bench-smoke)."""
    try:
        yield run_benchmark("cluster_up", bench_env)
    finally:
        if os.environ.get("CI") or os.environ.get("RESERVOIR_BENCH_KEEP_CLUSTER") != "1":
            launcher.Cluster(SMOKE_STATE_DIR).down()
