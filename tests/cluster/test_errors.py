"""`cluster.errors.with_retries`: the one loop for cluster calls outside a task (tenacity), on transient errors only."""

import pytest
from kubernetes.client.exceptions import ApiException

from cluster import errors
from cluster.errors import ClusterError, TransientClusterError, single_attempt, with_retries


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(errors, "backoff_seconds", lambda attempt, base, cap: 0)


def failing(*statuses):
    """A call that fails with these HTTP statuses in turn, then answers "done"; it counts its calls."""
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= len(statuses):
            raise ApiException(status=statuses[len(calls) - 1], reason="test")
        return "done"

    return call, calls


def test_transient_failures_are_tried_again_until_the_call_answers():
    call, calls = failing(503, 429)
    assert with_retries(call, attempts=4) == "done"
    assert len(calls) == 3


def test_it_gives_up_after_its_attempts_with_a_transient_cluster_error():
    call, calls = failing(503, 503, 503)
    with pytest.raises(TransientClusterError):
        with_retries(call, attempts=2)
    assert len(calls) == 2


def test_a_verdict_is_raised_at_once():
    call, calls = failing(403)
    with pytest.raises(ClusterError) as raised:
        with_retries(call, attempts=4)
    assert not isinstance(raised.value, TransientClusterError) and raised.value.status == 403
    assert len(calls) == 1


def test_inside_a_task_each_call_is_tried_once():
    call, calls = failing(503)
    with single_attempt(), pytest.raises(TransientClusterError):
        with_retries(call, attempts=4)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "body", ['{"message": "Job.batch \\"x\\" is invalid"}', b'{"message": "Job.batch \\"x\\" is invalid"}']
)
def test_the_apiservers_message_is_in_the_words_whether_its_answer_was_read_as_text_or_bytes(body):
    """A call made without the client's models (`_preload_content=False`, resources.create_job) has its error's body
    as bytes: the reason a job could not be created must still say what the API server said."""
    error = ApiException(status=422, reason="Unprocessable Entity")
    error.body = body
    assert errors.describe(error) == 'apiserver answered 422 Unprocessable Entity: Job.batch "x" is invalid'
