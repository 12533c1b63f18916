"""The lock commands from redis-py, in RESP2 and RESP3: proof that any driver can
use them without special support. Run by tests/drivers.rs with the server's port."""

import sys
import time

import redis


def check(protocol: int, port: int) -> None:
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    key = f"py:{protocol}:job"

    token = r.execute_command("LOCK.ACQUIRE", key, "worker-1", 10_000)
    assert isinstance(token, int) and token > 0, token
    assert r.execute_command("LOCK.ACQUIRE", key, "worker-1", 20_000) == token
    assert r.execute_command("LOCK.ACQUIRE", key, "worker-2", 10_000) is None
    assert 19_000 <= r.pttl(key) <= 20_000

    info = r.execute_command("LOCK.INFO", key)
    if protocol == 3:
        assert isinstance(info, dict), info
        fields = {k.decode(): v for k, v in info.items()}
    else:
        assert isinstance(info, list) and len(info) == 14, info
        fields = {info[i].decode(): info[i + 1] for i in range(0, 14, 2)}
    assert fields["owner"] == b"worker-1", fields
    assert fields["token"] == token, fields
    assert fields["waiters"] == 0, fields
    assert 0 < fields["ttl"] <= 20_000, fields
    assert fields["mode"] == b"exclusive", fields
    assert len(fields["holders"]) == 1, fields
    assert fields["queue"] == [], fields

    assert r.execute_command("LOCK.EXTEND", key, "worker-2", 5_000) == 0
    assert r.execute_command("LOCK.EXTEND", key, "worker-1", 5_000) == 1
    assert r.pttl(key) <= 5_000

    try:
        r.execute_command("LOCK.ACQUIRE", key, "worker-1", 0)
        raise AssertionError("ttl 0 was accepted")
    except redis.ResponseError as error:
        assert "invalid ttl" in str(error), error

    assert r.execute_command("LOCK.RELEASE", key, "worker-2") == 0
    assert r.execute_command("LOCK.RELEASE", key, "worker-1") == 1
    assert r.execute_command("LOCK.INFO", key) is None
    assert r.exists(key) == 0

    expiring = r.execute_command("LOCK.ACQUIRE", key, "worker-3", 20)
    time.sleep(0.05)
    assert r.execute_command("LOCK.EXTEND", key, "worker-3", 5_000) == 0
    later = r.execute_command("LOCK.ACQUIRE", key, "worker-4", 1_000)
    assert later > expiring, (later, expiring)
    print(f"redis-py {redis.__version__} RESP{protocol}: ok (tokens {token} < {later})")


if __name__ == "__main__":
    port = int(sys.argv[1])
    for protocol in (2, 3):
        check(protocol, port)
