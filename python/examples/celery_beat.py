"""A Celery beat task that runs once per schedule tick across all workers.

Beat may run on more than one machine (or a second beat sneaks in during a deploy),
and a slow run may still be going when the next tick fires: both would run the task
twice. ``@only_one`` skips a run while another holds the lock, renews the lock while
the task runs (so a long run keeps it), and releases it when the task returns.

    celery -A celery_beat worker --beat --loglevel=info
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from redis_lock_client import only_one

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

app = Celery("reports", broker=REDIS_URL)
app.conf.beat_schedule = {
    "daily-report-every-5-minutes": {"task": "celery_beat.daily_report", "schedule": 300.0},
}

locks = redis.Redis.from_url(REDIS_URL)


@app.task(name="celery_beat.daily_report")
@only_one(locks, "beat:daily-report", ttl=120.0)
def daily_report() -> str:
    # ... build the report; stamp its writes with the lock's token where the
    # resource can check it (see docs/commands.md, "Fencing tokens") ...
    return "report built"
