"""A Celery worker keeps its database connection from one task to the next (a new PostgreSQL connection per task was
a tenth of the submit task's time under load), and still never runs a task on a broken one: each task starts as a
Django request does (portal/celery.py)."""

import types

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun

from portal.celery import app
from tests.faultkit import backend_pid, end_backend

pytestmark = pytest.mark.django_db(transaction=True)


class Task:
    name = "tests.task"
    request = types.SimpleNamespace(is_eager=False)


def run_task(fixup: DjangoWorkerFixup, body) -> object:
    """What a worker does around a task: Celery's Django fixup and the signal handlers, then the task's body."""
    task = Task()
    fixup.on_task_prerun(task)
    task_prerun.send(sender=task, task_id="t", task=task, args=(), kwargs={})
    try:
        return body()
    finally:
        fixup.on_task_postrun(task)
        task_postrun.send(sender=task, task_id="t", task=task, args=(), kwargs={}, retval=None, state="SUCCESS")


def test_a_worker_keeps_its_database_connection_from_one_task_to_the_next():
    fixup = DjangoWorkerFixup(app)
    pids = [run_task(fixup, backend_pid) for _ in range(3)]
    assert len(set(pids)) == 1


def test_a_connection_that_broke_between_two_tasks_is_replaced_before_the_next_one_uses_it(settings):
    fixup = DjangoWorkerFixup(app)
    first = run_task(fixup, backend_pid)
    # PostgreSQL drops that backend between two tasks (a restart, an idle timeout, an admin).
    end_backend(first)
    second = run_task(fixup, backend_pid)
    assert second != first
