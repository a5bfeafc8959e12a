"""The submit task makes sure the team's LocalQueue is in the cluster before its Job (issue 31), but a worker that saw
that queue a moment ago does not ask again for every job of the team: in a burst of submissions that read was one more
apiserver round trip per job. The queue is asked for again after QUEUE_SEEN_SECONDS, and never remembered while it is
missing. (tests/jobs/test_cluster_jobs.py shows the queue made first on the real cluster.)"""

import pytest

from cluster.errors import ClusterError
from reconcile import jobs
from tests.factories import JobFactory, TeamFactory


@pytest.fixture
def cluster(monkeypatch):
    """A cluster whose LocalQueues are `queues` (namespaces that have one); reads and reconciles are counted."""
    state = {"queues": set(), "reads": 0, "reconciles": 0, "now": 1000.0, "reconcile_makes": True}

    def read(kind, name, namespace=None):
        assert kind == "LocalQueue"
        state["reads"] += 1
        return {"metadata": {"name": name}} if namespace in state["queues"] else None

    def reconcile():
        state["reconciles"] += 1
        if not state["reconcile_makes"]:
            raise ClusterError("a foreign LocalQueue is in the way", transient=False)
        state["queues"].update(state.get("teams", ()))
        return {}

    monkeypatch.setattr(jobs.kueue_objects, "read_kueue_object", read)
    monkeypatch.setattr(jobs.kueue, "reconcile", reconcile)
    monkeypatch.setattr(jobs.time, "monotonic", lambda: state["now"])
    monkeypatch.setattr(jobs, "_queues_seen", {})
    return state


@pytest.mark.django_db
def test_the_jobs_of_a_team_ask_for_its_queue_once_within_the_window(cluster):
    team = TeamFactory()
    cluster["queues"].add(team.namespace)
    for _ in range(3):
        jobs._ensure_local_queue(JobFactory(team=team))
    assert cluster["reads"] == 1
    other = TeamFactory()
    cluster["queues"].add(other.namespace)
    jobs._ensure_local_queue(JobFactory(team=other))
    assert cluster["reads"] == 2  # each team's queue is its own

    cluster["now"] += jobs.QUEUE_SEEN_SECONDS
    jobs._ensure_local_queue(JobFactory(team=team))
    assert cluster["reads"] == 3


@pytest.mark.django_db
def test_a_missing_queue_is_made_first_and_then_remembered(cluster):
    team = TeamFactory()
    cluster["teams"] = {team.namespace}
    jobs._ensure_local_queue(JobFactory(team=team))
    assert (cluster["reads"], cluster["reconciles"]) == (1, 1)
    jobs._ensure_local_queue(JobFactory(team=team))
    assert (cluster["reads"], cluster["reconciles"]) == (1, 1)


@pytest.mark.django_db
def test_a_queue_still_missing_is_never_remembered(cluster):
    team = TeamFactory()
    cluster["reconcile_makes"] = False
    for attempt in (1, 2):
        with pytest.raises(ClusterError):
            jobs._ensure_local_queue(JobFactory(team=team))
        assert cluster["reconciles"] == attempt
