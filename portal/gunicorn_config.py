"""gunicorn's settings for the web pods: the image, the chart and docker-compose run
`gunicorn --config portal/gunicorn_config.py ...`.

The portal's /metrics must count the requests of every worker of the pod, not only those of the worker that answers
the scrape. So the workers run in prometheus_client's multiprocess mode: PROMETHEUS_MULTIPROC_DIR is set here, in
the server before it starts its workers (only the web server's processes get it), each worker writes its latency
histogram into that directory and monitoring/metrics.py reads all of it at scrape time. The directory is emptied
when the server starts (a previous run's files would be counted again) and a worker that exits is marked dead.
"""

import os
from pathlib import Path

MULTIPROC_DIR = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", "/tmp/prometheus-multiproc"))


def on_starting(server):
    MULTIPROC_DIR.mkdir(parents=True, exist_ok=True)
    for stale in MULTIPROC_DIR.glob("*.db"):
        stale.unlink()


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid, str(MULTIPROC_DIR))
