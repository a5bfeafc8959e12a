"""A periodic run that waited in the queue longer than its period is dropped, not run late ahead of new work.

Users saw: after the cluster worker had been away (a crash loop, a rollout, a node drain) for half an hour, it first
drained the runs beat had kept sending meanwhile, in FIFO order: ~360 `billing.check_budgets` (each a LIST of every
Workload and ClusterQueue), ~360 reservation-boundary checks, 30 Kueue and 30 namespace reconciles, taint reconciles,
volume refreshes and spill sweeps, before any job submitted after the worker came back was created in the cluster.
Each of those runs only repeats the next one. docs/failures.md ("Celery worker killed ... the new worker drains the
queue") and PRODUCT.md ("the system converges within a minute of the service coming back").

The test looks at what beat sends, as the worker sees it: every periodic entry that runs at an interval (the cluster
queue's sweeps, and the default queue's frequent ones) expires within its period, as `jobs.converge`'s always did. It
checks configuration (`expires`) as a stand-in for the behaviour; the positive control makes sure it looked at the
cluster and default queues' entries at all."""

from celery.schedules import schedule as interval_schedule

from portal.celery import app, collect_beat_schedule


def _queue(task_name: str, options: dict) -> str:
    route = app.amqp.router.route(dict(options), task_name)
    return route["queue"].name


def _interval_seconds(entry: dict) -> float | None:
    every = entry["schedule"]
    seconds = every.run_every.total_seconds() if isinstance(every, interval_schedule) else every
    return seconds if isinstance(seconds, int | float) else None  # None: a crontab (hourly or rarer)


def test_every_frequent_periodic_run_is_dropped_when_it_waited_longer_than_its_period():
    stale_kept, looked_at = [], set()
    for key, entry in collect_beat_schedule().items():
        seconds = _interval_seconds(entry)
        if seconds is None:
            continue
        options = entry.get("options", {})
        looked_at.add((entry["task"], _queue(entry["task"], options)))
        expires = options.get("expires")
        if expires is None or expires > seconds:
            stale_kept.append(f"{key} ({entry['task']}, every {seconds:g} s, expires={expires})")
    assert {("billing.check_budgets", "cluster"), ("monitoring.evaluate_alerts", "default")} <= looked_at
    assert stale_kept == [], "runs that a worker outage piles up: " + "; ".join(stale_kept)
