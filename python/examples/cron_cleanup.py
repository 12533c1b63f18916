"""A cron script that runs on every machine, and does its work on one at a time.

    */5 * * * * REDIS_URL=redis://redis.internal:6379/ python3 /opt/jobs/cron_cleanup.py

Where another machine holds the lock the run is skipped (exit status 75, "try
again later", which cron does not mail about when you filter on it). A run that lost
its lock midway (the network cut, the server stalled) exits 76: its work after the
loss may overlap with the next holder's; the fencing token lets the resource refuse
its late writes.
"""

from __future__ import annotations

import os
import sys
import time

import redis

from redis_lock_client import LockLostError, only_one

client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/"))


@only_one(client, "cron:cleanup", ttl=60.0)
def cleanup() -> bool:
    for batch in range(3):
        print(f"deleting expired sessions, batch {batch}")
        time.sleep(0.1)
    return True


if __name__ == "__main__":
    try:
        ran = cleanup()
    except LockLostError as error:
        print(error, file=sys.stderr)
        sys.exit(76)
    if ran is None:
        print("another machine is cleaning up; skipped")
        sys.exit(75)
