"""The Python client sides of `make bench-peers`: each library used as its
documentation shows, with its default settings, on a connection of its own.

A side is a function that connects and returns (acquire, release): `acquire()`
returns once this client holds the lock (or False if the library gave up waiting:
the client then asks again, and the wait goes on), `release()` gives it back.

`run_client` is one client process: the same protocol as the Rust client
(bench/src/peer.rs), so the orchestrator treats every side alike."""

import json
import os
import threading
import time
import uuid

# Our lock's TTL (LOCK.ACQUIRE needs one); the libraries keep their own defaults.
TTL_MS = 10_000


def ours_redis_py(host, port, key):
    """LOCK.ACQUIRE … WAIT 0 from redis-py, with the settings a blocking call needs:
    no socket timeout (redis-py 6+ times reads out after 5 s by default) and no
    retries (its default retries a timed-out or lost call, which would queue the
    WAIT again behind the others)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    r = redis.Redis(host=host, port=port, socket_timeout=None, retry=Retry(NoBackoff(), 0))
    r.ping()
    owner = [b""]

    def acquire():
        owner[0] = uuid.uuid4().hex.encode()
        return r.execute_command("LOCK.ACQUIRE", key, owner[0], TTL_MS, "WAIT", 0) is not None

    def release():
        r.execute_command("LOCK.RELEASE", key, owner[0])

    return acquire, release


def ours_python(host, port, key):
    """This repository's Python client (python/, redis_lock_client): Lock.acquire()
    waits with LOCK.ACQUIRE … WAIT on a connection of its own (no read timeout, no
    retries), with the client's background renewal and lease; a plain redis.Redis
    with its defaults, as a user would pass it."""
    import redis
    from redis_lock_client import Lock

    r = redis.Redis(host=host, port=port)
    r.ping()
    lock = Lock(r, key, ttl=TTL_MS / 1000)
    return lock.acquire, lock.release


def ours_python_functions(host, port, key):
    """The same Python client on the function library (its waiting protocol: a place
    in the server's queue, BLPOP on a grant list of its own), as on a server where
    no module can be loaded."""
    import redis
    from redis_lock_client import Lock

    r = redis.Redis(host=host, port=port)
    r.ping()
    lock = Lock(r, key, ttl=TTL_MS / 1000, backend="functions")
    return lock.acquire, lock.release


def redis_py_lock(sleep):
    """redis-py's Lock: SET NX, and while the lock is busy, sleep and try again."""

    def side(host, port, key):
        import redis

        r = redis.Redis(host=host, port=port)
        r.ping()
        lock = r.lock(key) if sleep is None else r.lock(key, sleep=sleep)
        return lock.acquire, lock.release

    return side


def python_redis_lock(host, port, key):
    """python-redis-lock: SET NX, and while the lock is busy, BLPOP on a signal list
    that each release pushes to."""
    import redis
    import redis_lock

    r = redis.Redis(host=host, port=port)
    r.ping()
    lock = redis_lock.Lock(r, key)
    return lock.acquire, lock.release


def pottery_redlock(host, port, key):
    """pottery's Redlock with one master: SET NX PX on each master, and while the lock
    is busy, a random sleep of up to 0.2 s before trying again."""
    import redis
    from pottery import Redlock

    r = redis.Redis(host=host, port=port)
    r.ping()
    lock = Redlock(key=key, masters={r})
    return lock.acquire, lock.release


def etcd3_lock(host, port, key):
    """python-etcd3's Lock: a transaction that creates the key with a lease if it is
    absent, and while it is not, a watch for the key's next change."""
    import etcd3

    client = etcd3.client(host=host, port=port)
    client.status()
    lock = client.lock(key)
    return lock.acquire, lock.release


SIDES = {
    "ours-redis-py": ours_redis_py,
    "ours-python": ours_python,
    "ours-python-functions": ours_python_functions,
    "redis-py-lock": redis_py_lock(None),
    "redis-py-lock-1ms": redis_py_lock(0.001),
    "python-redis-lock": python_redis_lock,
    "pottery-redlock": pottery_redlock,
    "etcd3-lock": etcd3_lock,
}


def report(record, t1):
    """The JSON line the orchestrator reads (as bench/src/peer.rs prints it)."""
    held = record["held_s"]
    if record["holding_since"] is not None:
        held += max(0.0, t1 - record["holding_since"])
    pending = record["waiting_since"]
    return json.dumps(
        {
            "waits_us": [round(w, 1) for w in record["waits_us"]],
            "pending_us": None if pending is None else round((t1 - pending) * 1e6, 1),
            "held_s": held,
            "errors": record["errors"],
        }
    )


def run_client(side, host, port, key, hold_s, control, out):
    """One client: connect, say `ready`, read `go t0 t1`, loop until t1, report.

    `control` and `out` are file descriptors (a pipe from and to the orchestrator).
    At t1 a watchdog thread writes the report and ends the process, whatever the
    loop is doing (a wait still open then is reported as `pending`)."""
    acquire, release = SIDES[side](host, port, key)
    os.write(out, b"ready\n")
    with os.fdopen(control) as lines:
        _, t0, t1 = lines.readline().split()
    t0, t1 = float(t0), float(t1)
    record = {"waits_us": [], "held_s": 0.0, "waiting_since": None, "holding_since": None, "errors": 0}
    guard = threading.Lock()

    def watchdog():
        time.sleep(max(0.0, t1 - time.time()))
        with guard:
            os.write(out, (report(record, t1) + "\n").encode())
            os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    time.sleep(max(0.0, t0 - time.time()))
    while True:
        asked = time.time()
        with guard:
            if record["waiting_since"] is None:
                record["waiting_since"] = asked
        try:
            if not acquire():
                continue
        except Exception:  # a library error: count it and ask again, as a user would
            with guard:
                record["errors"] += 1
            time.sleep(0.01)
            continue
        granted = time.time()
        with guard:
            if granted <= t1:
                record["waits_us"].append((granted - record["waiting_since"]) * 1e6)
            record["waiting_since"] = None
            record["holding_since"] = granted
        if hold_s > 0:
            time.sleep(hold_s)
        done = time.time()
        with guard:
            record["held_s"] += done - granted
            record["holding_since"] = None
        try:
            release()
        except Exception:
            with guard:
                record["errors"] += 1
