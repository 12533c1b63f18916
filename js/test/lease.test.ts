// The lease rule (lease.ts, `Writes`) with the time given, without a server: how
// long a lease may run when writes with other TTLs may still be applied after the
// one it counts from; and the pieces the huge and the tiny TTLs need (timers past
// 2^31 − 1 ms, exact TTLs as bigints, a lease shorter than its margin), the owner's
// length, and a check that reads the clock.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { LockLostError, type LossReason } from "../src/errors.js";
import { Lease, Writes, now } from "../src/lease.js";
import { checkOwner, margin, span } from "../src/protocol.js";
import { MAX_TIMER_MS, later } from "../src/timers.js";

/** The deadline of V sent at `sent` with `ttl`, alone. */
const alone = (sent: number, ttl: number): number => sent + ttl - margin(ttl);

describe("the lease rule", () => {
  it("leaves steady renewals of one TTL as they were", () => {
    const writes = new Writes({ sent: 0, ttl: 3000, answered: 5 });
    assert.equal(writes.deadline(), alone(0, 3000));
    assert.equal(writes.renewalDue(), 1000);
    const renewal = writes.send(3000, 1000);
    assert.equal(writes.deadline(), alone(0, 3000), "in flight, an equal TTL changes nothing");
    writes.applied(renewal, 1010);
    assert.equal(writes.deadline(), alone(1000, 3000));
    assert.equal(writes.renewalDue(), 2000);
    const late = writes.send(3000, 2000);
    writes.abandoned(late);
    writes.applied(writes.send(3000, 2100), 2110);
    assert.equal(writes.deadline(), alone(2100, 3000), "an abandoned write of the same TTL changes nothing");
  });

  it("shortens the lease while a shorter TTL is in flight", () => {
    const writes = new Writes({ sent: 0, ttl: 30_000, answered: 5 });
    writes.send(1000, 100);
    assert.equal(writes.deadline(), alone(100, 1000));
    assert.equal(writes.renewalDue(), 100 + 1000 / 3);
  });

  it("keeps a write never answered for the life of the holding, counted from the newest send", () => {
    const writes = new Writes({ sent: 0, ttl: 30_000, answered: 5 });
    const lost = writes.send(1000, 100);
    writes.abandoned(lost);
    assert.equal(writes.deadline(), alone(100, 1000));
    writes.applied(writes.send(30_000, 5000), 5010);
    assert.equal(writes.deadline(), alone(5000, 1000), "it may still arrive after the newest write");
    writes.applied(writes.send(30_000, 60_000), 60_010);
    assert.equal(writes.deadline(), alone(60_000, 1000));
    assert.equal(writes.shortestTtl(), 1000);
  });

  it("renews at a third of the new TTL after an extend to a shorter one", () => {
    const writes = new Writes({ sent: 0, ttl: 30_000, answered: 5 });
    const extend = writes.send(1200, 100);
    writes.applied(extend, 110);
    assert.equal(writes.deadline(), alone(100, 1200));
    assert.equal(writes.renewalDue(), 500);
  });

  it("does not let an extend to a longer TTL outlast a short renewal in flight", () => {
    const writes = new Writes({ sent: 0, ttl: 1000, answered: 5 });
    const renewal = writes.send(1000, 333);
    const extend = writes.send(30_000, 400);
    writes.applied(extend, 410);
    assert.equal(writes.deadline(), alone(400, 1000), "the renewal may still be applied after the extend");
    writes.applied(renewal, 420);
    assert.equal(writes.deadline(), alone(400, 1000), "answered after the extend was sent: it may have come last");
    assert.equal(writes.renewalDue(), 400 + 1000 / 3);
    writes.applied(writes.send(30_000, 700), 710);
    assert.equal(writes.deadline(), alone(700, 30_000), "both answered before the next write was sent");
    assert.equal(writes.renewalDue(), 10_700);
  });

  it("counts a renewal answered after the extend that was sent after it (a renewal reordered after an extend)", () => {
    // acquire 3 s at 0; a renewal (3 s) at 1000, held back in the network; the
    // holder's extend (30 s) at 1200 reaches the server first and is answered; the
    // renewal is applied last: the server's expiry is then 1400 + 3000.
    const writes = new Writes({ sent: 0, ttl: 3000, answered: 5 });
    const renewal = writes.send(3000, 1000);
    const extend = writes.send(30_000, 1200);
    writes.applied(extend, 1300);
    assert.equal(writes.deadline(), alone(1200, 3000));
    writes.applied(renewal, 1400);
    assert.equal(writes.deadline(), alone(1200, 3000));
    assert.ok(writes.deadline() < 1400 + 3000);
    assert.equal(writes.renewalDue(), 2200);
  });

  it("counts a shorter write sent after V from its own send (an extend late in a holding)", () => {
    const writes = new Writes({ sent: 0, ttl: 30_000, answered: 5 });
    writes.send(1000, 20_000);
    assert.equal(writes.deadline(), alone(20_000, 1000));
  });
});

describe("the lease", () => {
  const loss = (why: LossReason): LockLostError => new LockLostError("k", "o", 1n, why);

  it("reads the clock in its signal and its lost flag, whatever ran first", async () => {
    const ended: string[] = [];
    const lease = new Lease(now(), 100, loss, (why) => ended.push(why));
    // No timer armed (start() not called): only the accessors can see the deadline.
    assert.equal(lease.signal.aborted, false);
    await sleep(60);
    assert.equal(lease.signal.aborted, true);
    assert.equal((lease.signal.reason as LockLostError).why, "expired");
    assert.deepEqual(ended, ["expired"]);
  });

  it("is not revived by a reply that comes after it ran out", async () => {
    const lease = new Lease(now(), 100, loss, () => undefined);
    const write = lease.send(100);
    await sleep(60);
    assert.equal(lease.applied(write), false);
    assert.equal(lease.lost, true);
  });

  it("ends a lease at or under its margin on the next turn of the timers, not in its constructor", async () => {
    for (const ttl of [1, 50]) {
      const ended: string[] = [];
      const lease = new Lease(now(), ttl, loss, (why) => ended.push(why));
      lease.start();
      assert.deepEqual(ended, [], `TTL ${ttl}`);
      await sleep(5);
      assert.deepEqual(ended, ["expired"], `TTL ${ttl}`);
    }
  });

  it("holds a TTL of 2^62 - 1 ms without ending or overflowing a timer", async () => {
    const warnings: string[] = [];
    const warned = (warning: Error): void => void warnings.push(warning.name);
    process.on("warning", warned);
    try {
      const ttl = span(2n ** 62n - 1n);
      const lease = new Lease(now(), ttl.ms, loss, () => undefined);
      lease.start();
      assert.ok(lease.renewalDue() > now() + 2 ** 60);
      await sleep(20);
      assert.equal(lease.lost, false);
      assert.ok(lease.remaining() > 2 ** 61);
      lease.dispose();
    } finally {
      process.off("warning", warned);
    }
    assert.deepEqual(warnings, []);
  });
});

describe("timers and arguments", () => {
  it("waits past 2^31 - 1 ms without firing at once", async () => {
    let fired = 0;
    const long = later(MAX_TIMER_MS + 10, () => fired++);
    const huge = later(2 ** 62, () => fired++);
    const short = later(5, () => fired++);
    await sleep(30);
    assert.equal(fired, 1);
    long.clear();
    huge.clear();
    short.clear();
  });

  it("takes TTLs as numbers or exact bigints up to 2^62 - 1", () => {
    assert.deepEqual(span(1.2), { text: "2", ms: 2 });
    assert.deepEqual(span(2n ** 62n - 1n), { text: "4611686018427387903", ms: 2 ** 62 });
    assert.equal(span(2 ** 62 - 1024).text, String(2n ** 62n - 1024n));
    for (const bad of [0, -1, NaN, Infinity, 2 ** 62, 0n, -5n, 2n ** 62n]) {
      assert.throws(() => span(bad), RangeError, String(bad));
    }
    assert.throws(() => span(2 ** 62), /give a bigint/);
  });

  it("refuses an owner id of more than 256 bytes before sending", () => {
    assert.equal(checkOwner("x".repeat(256)), "x".repeat(256));
    assert.throws(() => checkOwner("x".repeat(257)), RangeError);
    assert.throws(() => checkOwner("é".repeat(129)), /256 bytes, not 258/);
    assert.throws(() => checkOwner(""), TypeError);
  });
});
