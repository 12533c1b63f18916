"""The five-line example: one report at a time across every machine, its writes
stamped with the lock's fencing token.

    python examples/quickstart.py   # with a redis-server with the module on :6379
"""

import redis

from redis_lock_client import Lock

with Lock(redis.Redis(), "report:daily", ttl=30.0) as lock:
    print(f"building the report, fenced with token {lock.token}")
