"""The figures of one run of `make bench-peers`, the targets, and PEERS.md."""

import math
import os

LABELS = {
    "ours-rust": "ours: LOCK.ACQUIRE WAIT, Rust client",
    "ours-redis-py": "ours: LOCK.ACQUIRE WAIT, redis-py",
    "ours-python": "ours: the Python client (redis_lock_client)",
    "ours-rust-functions": "ours: the function library, Rust client",
    "ours-python-functions": "ours: the function library, Python client",
    "redis-py-lock": "redis-py Lock (sleep 0.1 s)",
    "redis-py-lock-1ms": "redis-py Lock, sleep 1 ms",
    "python-redis-lock": "python-redis-lock",
    "pottery-redlock": "pottery Redlock, 1 master",
    "etcd3-lock": "etcd, python-etcd3 Lock",
    "redisson-rlock": "Redisson RLock (watchdog, pub/sub)",
    "redisson-fairlock": "Redisson RFairLock",
    "redsync": "redsync (defaults)",
    "redsync-tuned": "redsync, 1 ms retry, no give-up",
    "ours-go": "ours: the Go client (module)",
    "ours-go-functions": "ours: the function library, Go client",
    "bsm-redislock": "bsm/redislock, 100 ms linear backoff",
    "bsm-redislock-1ms": "bsm/redislock, 1 ms linear backoff",
    "ours-rust-limit3": "ours: LIMIT 3 WAIT, Rust client",
    "redisson-semaphore": "Redisson RSemaphore, 3 permits",
    "ours-rust-rw": "ours: SHARED + writers, Rust client",
    "redisson-rwlock": "Redisson RReadWriteLock",
    "ours-node": "ours: the Node client (ioredis)",
    "ours-node-redis": "ours: the Node client (node-redis)",
    "ours-node-functions": "ours: the function library, Node client (ioredis)",
    "ours-ioredis": "ours: LOCK.ACQUIRE WAIT, plain ioredis",
    "node-redlock": "node-redlock 5 (defaults)",
    "node-redis-semaphore": "redis-semaphore Mutex (defaults)",
}
OURS = ["ours-rust", "ours-redis-py", "ours-python", "ours-ioredis"]
# The function library's sides (no module), with targets of their own.
FUNCTIONS = ["ours-rust-functions", "ours-python-functions", "ours-node-functions", "ours-go-functions"]
# The Node client's sides, against the Node peers (issue 34).
NODE = ["ours-node", "ours-node-redis", "ours-node-functions"]
NODE_PEERS = ["node-redlock", "node-redis-semaphore"]
# The Go client's sides, with the targets of issue 32 against the Go peers.
GO_OURS = ["ours-go", "ours-go-functions"]
GO_PEERS = ["redsync", "redsync-tuned", "bsm-redislock", "bsm-redislock-1ms"]
# The TTL of our locks in the harness (clients.py, bench/peers/go): the bound of a
# dead holder's recovery.
TTL_S = 10.0
# Sides that are not exclusive locks, by kind: each is compared with its own kind only.
KIND = {
    "ours-rust-limit3": "semaphore",
    "redisson-semaphore": "semaphore",
    "ours-rust-rw": "rwlock",
    "redisson-rwlock": "rwlock",
}
# Our side of each kind and its peers, for the targets of issue 25.
ISSUE25 = {
    "exclusive": ("ours-rust", {"Redisson": ["redisson-rlock", "redisson-fairlock"],
                                "redsync": ["redsync", "redsync-tuned"]}),
    "semaphore": ("ours-rust-limit3", {"Redisson": ["redisson-semaphore"]}),
    "rwlock": ("ours-rust-rw", {"Redisson": ["redisson-rwlock"]}),
}

# Everything above this line in PEERS.md is written by peers.py; what follows it is
# kept as it is when the file is written again.
MARKER = "<!-- Written by bench/peers/peers.py down to here; the rest by hand, kept on a rerun. -->"


def quantile(samples, q):
    """Nearest-rank quantile, as bench/src/stats.rs; 0 when empty."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def fairness(reports):
    """min / max acquisitions per client, within each role (readers and writers of a
    read-write lock are not expected to get as many grants as each other)."""
    lowest = 1.0
    for role in {r.get("role") for r in reports}:
        counts = [len(r["waits_us"]) for r in reports if r.get("role") == role]
        lowest = min(lowest, min(counts) / max(counts) if max(counts) else 0.0)
    return lowest


def waits_of(reports):
    # A wait still open at the end counts with what it had waited so far, so a
    # starved client shows in the percentiles instead of vanishing from them.
    waits = [w for r in reports for w in r["waits_us"]]
    return waits + [r["pending_us"] for r in reports if r["pending_us"] is not None]


def summarise(side, n, hold_ms, seconds, reports, cpu_s, commands):
    per_client = [len(r["waits_us"]) for r in reports]
    acquisitions = sum(per_client)
    waits = waits_of(reports)
    per_acquisition = max(acquisitions, 1)
    writers = [r for r in reports if r.get("role") == "writer"]
    extra = {}
    if writers:
        writer_waits = waits_of(writers)
        extra = {
            "writers": len(writers),
            "writer_rate": sum(len(r["waits_us"]) for r in writers) / seconds,
            "writer_p99_ms": quantile(writer_waits, 0.99) / 1000,
            "writer_max_ms": max(writer_waits, default=0.0) / 1000,
        }
    return extra | {
        "side": side,
        "n": n,
        "hold_ms": hold_ms,
        "seconds": seconds,
        "acquisitions": acquisitions,
        "rate": acquisitions / seconds,
        "utilisation": sum(r["held_s"] for r in reports) / seconds,
        "min_per_client": min(per_client),
        "max_per_client": max(per_client),
        "fairness": fairness(reports),
        "p50_ms": quantile(waits, 0.5) / 1000,
        "p99_ms": quantile(waits, 0.99) / 1000,
        "max_ms": max(waits, default=0.0) / 1000,
        "cpu_us": cpu_s * 1e6 / per_acquisition,
        "commands": commands / per_acquisition,
        "errors": sum(r["errors"] for r in reports),
    }


def dead_line(dead):
    after = "none" if dead["next_grant_s"] is None else f"{dead['next_grant_s']:.2f} s"
    return (f"dead holder: {dead['side']:<18} killed {dead['held_before_kill_s']:.1f} s after its grant; "
            f"next grant {after} after the kill")


def dead_waiter_line(dead):
    after = "none" if dead["next_grant_s"] is None else f"{dead['next_grant_s']:.2f} s"
    return f"dead waiter: {dead['side']:<18} next grant behind it {after} after the kill"


def line(run):
    return (f"H={run['hold_ms']:>3} ms N={run['n']:>2} {run['side']:<18} {run['rate']:9.1f}/s "
            f"util {run['utilisation']:.2f} fair {run['fairness']:.2f} "
            f"p50 {run['p50_ms']:8.2f} p99 {run['p99_ms']:8.2f} max {run['max_ms']:8.1f} ms "
            f"cpu {run['cpu_us']:7.1f} µs cmds {run['commands']:5.2f} err {run['errors']}")


def table(runs):
    rows = [
        "| H (ms) | N | side | run (s) | acquisitions/s | utilisation | min / max per client | fairness "
        "| wait p50 (ms) | p99 (ms) | max (ms) | server CPU per acquisition (µs) | server requests per acquisition | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        rows.append(
            f"| {r['hold_ms']} | {r['n']} | {LABELS.get(r['side'], r['side'])} | {r['seconds']:g} "
            f"| {r['rate']:.1f} | {r['utilisation']:.2f} | {r['min_per_client']} / {r['max_per_client']} "
            f"| {r['fairness']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.1f} "
            f"| {r['cpu_us']:.1f} | {r['commands']:.2f} | {r['errors']} |"
        )
    return "\n".join(rows)


def cells(runs):
    """{(hold_ms, n): {side: run}}, in the order the runs came."""
    out = {}
    for r in runs:
        out.setdefault((r["hold_ms"], r["n"]), {})[r["side"]] = r
    return out


def fmt_cells(items):
    return ", ".join(f"H={h} N={n}: {v}" for (h, n), v in items)


def verdict(ok, figures):
    return f"**{'met' if ok else 'not met'}** ({figures})"


def peer_runs(sides):
    """The runs of a cell that are peers: not ours (module or library), not another kind."""
    return [s for name, s in sides.items()
            if name not in OURS and name not in FUNCTIONS and name not in NODE and name not in GO_OURS
            and name not in KIND]


def p99_target(got, ours):
    """The line of the p99 target (at H=10 ms, N ≥ 16, at most half the best peer's),
    or none when no cell has peers."""
    p99 = []
    for cell, sides in got.items():
        if cell[0] == 10 and cell[1] >= 16 and peer_runs(sides):
            best = min(peer_runs(sides), key=lambda r: r["p99_ms"])
            p99.append((cell, sides[ours]["p99_ms"], best["p99_ms"], best["side"]))
    if not p99:
        return []
    return [
        "- p99 wait ≤ 0.5x the best peer's at H=10 ms, N ≥ 16: "
        + verdict(all(o <= 0.5 * b for _, o, b, _ in p99),
                  fmt_cells((c, f"{o:.1f} ms against {b:.1f} ms ({s}), {o / max(b, 1e-9):.2f}x")
                            for c, o, b, s in p99))
    ]


def targets(runs):
    """One line per target and side of ours, with the measured figures."""
    lines = []
    by_cell = cells(runs)
    for ours in OURS:
        got = {cell: sides for cell, sides in by_cell.items() if ours in sides}
        if not got:
            continue
        lines.append(f"\n**{LABELS[ours]}**\n")

        peers = peer_runs

        ratios = []
        for cell, sides in got.items():
            if peers(sides):
                cheapest = min(peers(sides), key=lambda r: r["cpu_us"])
                ratios.append((cell, sides[ours]["cpu_us"] / max(cheapest["cpu_us"], 1e-9), cheapest["side"]))
        if ratios:
            worst = max(ratios, key=lambda x: x[1])
            lines.append(
                "- Server CPU per acquisition ≤ 0.8x the cheapest peer's in every cell: "
                + verdict(all(r <= 0.8 for _, r, _ in ratios),
                          f"worst {worst[1]:.2f}x at H={worst[0][0]} N={worst[0][1]} against {worst[2]}; "
                          + fmt_cells((c, f"{r:.2f}x") for c, r, _ in ratios))
            )

        fast, equal = [], []
        for cell, sides in got.items():
            if not peers(sides):
                continue
            best = max(peers(sides), key=lambda r: r["rate"])
            ratio = sides[ours]["rate"] / max(best["rate"], 1e-9)
            if cell[0] == 0 and cell[1] >= 4:
                fast.append((cell, ratio))
            elif cell[0] > 0:
                equal.append((cell, ratio))
        if fast:
            lines.append(
                "- Acquisitions/s ≥ 1.3x the best peer's at H=0, N ≥ 4: "
                + verdict(all(r >= 1.3 for _, r in fast), fmt_cells((c, f"{r:.2f}x") for c, r in fast))
            )
        if equal:
            lines.append(
                "- Acquisitions/s equal to the best peer's at H > 0 (taken as ≥ 0.95x): "
                + verdict(all(r >= 0.95 for _, r in equal), fmt_cells((c, f"{r:.2f}x") for c, r in equal))
            )

        fair = [(cell, sides[ours]["fairness"]) for cell, sides in got.items()]
        lines.append(
            "- Fairness (min/max per client) ≥ 0.9 in every cell: "
            + verdict(all(f >= 0.9 for _, f in fair),
                      f"lowest {min(f for _, f in fair):.2f}; " + fmt_cells((c, f"{f:.2f}") for c, f in fair))
        )

        lines.extend(p99_target(got, ours))

        etcd = [(cell, sides[ours], sides["etcd3-lock"]) for cell, sides in got.items() if "etcd3-lock" in sides]
        if etcd:
            rate = [(c, o["rate"] / max(e["rate"], 1e-9)) for c, o, e in etcd if c[0] == 0]
            lines.append(
                "- Against etcd, acquisitions/s ≥ 5x at H=0: "
                + verdict(all(r >= 5 for _, r in rate), fmt_cells((c, f"{r:.1f}x") for c, r in rate))
            )
            ratio = [(c, o["p99_ms"] / max(e["p99_ms"], 1e-9), o["fairness"] >= e["fairness"]) for c, o, e in etcd]
            lines.append(
                "- Against etcd, p99 wait ≤ 0.2x at fairness at least as good, in every cell: "
                + verdict(all(r <= 0.2 and f for _, r, f in ratio),
                          fmt_cells((c, f"{r:.2f}x{'' if f else ' (less fair)'}") for c, r, f in ratio))
            )
    return "\n".join(lines)


def functions_targets(runs):
    """The function library's targets (its issue): fairness ≥ 0.9 in every cell,
    acquisitions/s at H=0 at least python-redis-lock's, p99 wait at H=10 ms, N ≥ 16
    at most half the best peer's."""
    by_cell = {}
    for run in runs:
        by_cell.setdefault((run["hold_ms"], run["n"]), {})[run["side"]] = run
    lines = []
    for side in FUNCTIONS:
        got = {cell: sides for cell, sides in by_cell.items() if side in sides}
        if not got:
            continue
        lines.append(f"\n**{LABELS[side]}**\n")
        fair = [(cell, sides[side]["fairness"]) for cell, sides in got.items()]
        lines.append(
            "- Fairness (min/max per client) ≥ 0.9 in every cell: "
            + verdict(all(f >= 0.9 for _, f in fair), fmt_cells((c, f"{f:.2f}") for c, f in fair))
        )
        rate = [(cell, sides[side]["rate"] / max(sides["python-redis-lock"]["rate"], 1e-9))
                for cell, sides in got.items() if cell[0] == 0 and "python-redis-lock" in sides]
        if rate:
            lines.append(
                "- Acquisitions/s at H=0 ≥ python-redis-lock's: "
                + verdict(all(r >= 1 for _, r in rate), fmt_cells((c, f"{r:.2f}x") for c, r in rate))
            )
        lines.extend(p99_target(got, side))
    return "\n".join(lines)


def issue34(runs):
    """The targets of issue 34: the Node client against the Node peers (node-redlock,
    redis-semaphore): acquisitions/s at H=0 ≥ 1.3x the best peer's at equal or better
    fairness, p99 wait at H=10 ms, N ≥ 16 ≤ 0.5x the best peer's, fairness ≥ 0.9 in
    every cell."""
    lines = []
    for ours in NODE:
        got = {cell: sides for cell, sides in cells(runs).items() if ours in sides}
        if not got:
            continue
        lines.append(f"\n**{LABELS[ours]}**\n")
        fast = []
        for c, s in got.items():
            peers = [s[p] for p in NODE_PEERS if p in s]
            if c[0] == 0 and c[1] >= 4 and peers:
                best = max(peers, key=lambda r: r["rate"])
                fast.append((c, s[ours]["rate"] / max(best["rate"], 1e-9), s[ours]["fairness"], best))
        if fast:
            lines.append(
                "- Acquisitions/s at H=0 ≥ 1.3x the best Node peer's, at equal or better fairness: "
                + verdict(all(r >= 1.3 and f >= b["fairness"] for _, r, f, b in fast),
                          fmt_cells((c, f"{r:.2f}x {b['side']}, fairness {f:.2f} against {b['fairness']:.2f}")
                                    for c, r, f, b in fast)))
        slow = []
        for c, s in got.items():
            peers = [s[p] for p in NODE_PEERS if p in s]
            if c[0] == 10 and c[1] >= 16 and peers:
                best = min(peers, key=lambda r: r["p99_ms"])
                slow.append((c, s[ours]["p99_ms"], best["p99_ms"], best["side"]))
        if slow:
            lines.append(
                "- p99 wait at H=10 ms, N ≥ 16 ≤ 0.5x the best Node peer's: "
                + verdict(all(o <= 0.5 * b for _, o, b, _ in slow),
                          fmt_cells((c, f"{o:.1f} ms against {b:.1f} ms ({p}), {o / max(b, 1e-9):.2f}x")
                                    for c, o, b, p in slow)))
        fair = [(c, s[ours]["fairness"]) for c, s in got.items()]
        lines.append(
            "- Fairness ≥ 0.9 in every cell: "
            + verdict(all(f >= 0.9 for _, f in fair),
                      f"lowest {min(f for _, f in fair):.2f}; " + fmt_cells((c, f"{f:.2f}") for c, f in fair)))
    return "\n".join(lines)


def issue25(runs):
    """The targets of issue 25: our Rust client against Redisson and redsync, kind by
    kind, one line per target and peer, with the measured figures."""
    lines = []
    by_cell = cells(runs)
    for kind, (ours, groups) in ISSUE25.items():
        got = {cell: sides for cell, sides in by_cell.items() if ours in sides}
        if not got:
            continue
        lines.append(f"\n**{kind}: {LABELS[ours]}**\n")
        for group, names in groups.items():
            def best(sides, field, pick):
                present = [sides[s] for s in names if s in sides]
                return pick(present, key=lambda r: r[field]) if present else None

            fast = [(c, s[ours]["rate"] / max(b["rate"], 1e-9), b["side"]) for c, s in got.items()
                    if c[0] == 0 and (b := best(s, "rate", max))]
            if fast:
                lines.append(
                    f"- Acquisitions/s at H=0 ≥ 1.3x {group}'s best: "
                    + verdict(all(r >= 1.3 for _, r, _ in fast), fmt_cells((c, f"{r:.2f}x ({b})") for c, r, b in fast)))
            slow = [(c, s[ours]["p99_ms"], b["p99_ms"], b["side"]) for c, s in got.items()
                    if c[0] == 10 and c[1] >= 16 and (b := best(s, "p99_ms", min))]
            if slow:
                lines.append(
                    f"- p99 wait at H=10 ms, N ≥ 16 ≤ 0.5x {group}'s best: "
                    + verdict(all(o <= 0.5 * b for _, o, b, _ in slow),
                              fmt_cells((c, f"{o:.1f} ms against {b:.1f} ms ({s}), {o / max(b, 1e-9):.2f}x")
                                        for c, o, b, s in slow)))
            if kind == "rwlock":
                writer = [(c, s[ours]["writer_p99_ms"], b["writer_p99_ms"], b["side"]) for c, s in got.items()
                          if c[0] == 10 and (b := best(s, "writer_p99_ms", min))]
                if writer:
                    lines.append(
                        f"- Writers' p99 wait at H=10 ms ≤ 0.5x {group}'s: "
                        + verdict(all(o <= 0.5 * b for _, o, b, _ in writer),
                                  fmt_cells((c, f"{o:.1f} ms against {b:.1f} ms, {o / max(b, 1e-9):.2f}x")
                                            for c, o, b, _ in writer)))
            fair = [(c, s[ours]["fairness"], b["fairness"], b["side"]) for c, s in got.items()
                    if c[1] > 1 and (b := best(s, "fairness", max))]
            lower = [(c, o, t, b) for c, o, t, b in fair if t < 0.9]
            if fair:
                lines.append(
                    f"- Fairness ≥ 0.9 where {group}'s best is lower: "
                    + verdict(all(o >= 0.9 for _, o, _, _ in lower),
                              (fmt_cells((c, f"{o:.2f} against {t:.2f}") for c, o, t, _ in lower)
                               or "theirs is ≥ 0.9 in every cell")))
        if kind == "exclusive":
            cpu = [(c, s[ours]["cpu_us"] / max(s["redisson-fairlock"]["cpu_us"], 1e-9)) for c, s in got.items()
                   if "redisson-fairlock" in s]
            if cpu:
                lines.append(
                    "- Server CPU per acquisition ≤ 0.8x RFairLock's: "
                    + verdict(all(r <= 0.8 for _, r in cpu), fmt_cells((c, f"{r:.2f}x") for c, r in cpu)))
    return "\n".join(lines)


def issue32(runs, dead):
    """The targets of issue 32: the Go client (module and library) against redsync and
    bsm/redislock, one line per target, with the measured figures."""
    lines = []
    by_cell = cells(runs)
    for ours in GO_OURS:
        got = {cell: sides for cell, sides in by_cell.items() if ours in sides}
        if not got:
            continue
        lines.append(f"\n**{LABELS[ours]}**\n")
        fast = []
        for cell, sides in got.items():
            peers = [sides[p] for p in GO_PEERS if p in sides]
            if cell[0] != 0 or not peers:
                continue
            best = max(peers, key=lambda r: r["rate"])
            o = sides[ours]
            fast.append((cell, o["rate"] / max(best["rate"], 1e-9), o["fairness"], best["fairness"], best["side"]))
        if fast:
            lines.append(
                "- Acquisitions/s at H=0 ≥ 1.3x the best Go peer's, at equal or better fairness: "
                + verdict(all(r >= 1.3 and fo >= fb for _, r, fo, fb, _ in fast),
                          fmt_cells((c, f"{r:.2f}x {b}, fairness {fo:.2f} against {fb:.2f}")
                                    for c, r, fo, fb, b in fast)))
        slow = [(c, s[ours]["p99_ms"], min(s[p]["p99_ms"] for p in ("redsync", "redsync-tuned") if p in s))
                for c, s in got.items() if c[0] == 10 and c[1] >= 16 and ("redsync" in s or "redsync-tuned" in s)]
        if slow:
            lines.append(
                "- p99 wait at H=10 ms, N ≥ 16 ≤ 0.5x redsync's (the better of its two settings): "
                + verdict(all(o <= 0.5 * b for _, o, b in slow),
                          fmt_cells((c, f"{o:.1f} ms against {b:.1f} ms, {o / max(b, 1e-9):.2f}x") for c, o, b in slow)))
        fair = [(cell, sides[ours]["fairness"]) for cell, sides in got.items()]
        lines.append(
            "- Fairness (min/max per client) ≥ 0.9 in every cell: "
            + verdict(all(f >= 0.9 for _, f in fair),
                      f"lowest {min(f for _, f in fair):.2f}; " + fmt_cells((c, f"{f:.2f}") for c, f in fair)))
        recovery = [d for d in dead if d["side"] == ours]
        if recovery:
            d = recovery[0]
            after = d["next_grant_s"]
            lines.append(
                f"- A dead holder's lock recovered within the TTL ({TTL_S:g} s): "
                + verdict(after is not None and after <= TTL_S,
                          "no grant" if after is None else f"next grant {after:.2f} s after the kill"))
    return "\n".join(lines)


def dead_table(dead):
    rows = ["| side | held before the kill (s) | next client granted after the kill (s) |", "|---|---|---|"]
    for d in dead:
        after = f"none within {d['limit_s']:g}" if d["next_grant_s"] is None else f"{d['next_grant_s']:.2f}"
        rows.append(f"| {LABELS.get(d['side'], d['side'])} | {d['held_before_kill_s']:.1f} | {after} |")
    return "\n".join(rows)


def dead_waiter_table(dead):
    rows = ["| side | next waiter granted after the kill (s) |", "|---|---|"]
    for d in dead:
        after = f"none within {d['limit_s']:g}" if d["next_grant_s"] is None else f"{d['next_grant_s']:.2f}"
        rows.append(f"| {LABELS.get(d['side'], d['side'])} | {after} |")
    return "\n".join(rows)


def write(results, path):
    m = results["machine"]
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items())
    kept = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if MARKER in text:
            kept = text.split(MARKER, 1)[1]
    runs = results["runs"]
    etcd = ("" if m["etcd"] == "not run" else
            f"etcd {m['etcd']} (Debian's etcd-server, defaults: one member, WAL fsynced to disk), ")
    parts = [
        "# redis-lock against the locks users would pick instead",
        "",
        f"Produced by `make bench-peers` (bench/peers/) on {m['date']}, at commit "
        f"{m.get('commit', 'unknown')} (module and harness), on a shared machine: "
        f"{m['nproc']} cores ({m['cpu']}), Linux {m['kernel']}, Redis {m['redis']} (module release "
        f"build, no persistence), {etcd}Python {m['python']} with {libs}. Other developers were compiling "
        "on the same 2 cores at the same time: timings are noisy, server CPU and requests per "
        "acquisition less so.",
        "",
        "The workload of python-redis-lock's examples/bench.py: N client processes contend for "
        "one lock for the run's duration, each looping acquire (waiting until it holds the lock) "
        "→ hold H ms → release, each on a connection of its own. Each cell of the matrix runs "
        "every side once, in an order that rotates from cell to cell. A run lasts at least "
        f"{results['cycles']:g} trips of the lock around all N clients (N × H × {results['cycles']:g}), "
        "so that per-client counts are large enough for a fair lock to show it.",
        "",
        "- acquisitions/s: grants in the run over its duration; utilisation: the share of the run "
        "in which some client held the lock, as the clients saw it (grant reply to release call).",
        "- fairness: min / max acquisitions per client; wait: from the acquire call to the grant, "
        "waits still open at the end counted with what they had waited so far.",
        "- server CPU: redis-server's used_cpu_user + used_cpu_sys (etcd: its process's CPU from "
        "/proc), over the run; requests: Redis's total_commands_processed (etcd: gRPC messages "
        "received), both per acquisition.",
        "",
        "![acquisitions/s and p99 wait against N, H = 10 ms](peers-h10.png)",
        "![acquisitions/s and p99 wait against N, H = 0](peers-h0.png)",
        "![server CPU per acquisition](peers-cpu.png)",
        "",
        "## Results",
        "",
        table(runs),
        "",
        "## Targets (ratios within this run)",
        targets(runs),
        "",
        "## The function library (no module): its targets within this run",
        functions_targets(runs),
        "",
        "## Issue 25: against Redisson and redsync (ratios within this run)",
        "",
        "Semaphore rows: 3 permits, N clients. Read-write rows: N = 16 readers and 2 writers "
        "more; their fairness is taken within readers and within writers.",
        issue25(runs),
        "",
        "## Issue 34: the Node client against node-redlock and redis-semaphore (ratios within this run)",
        issue34(runs),
        "",
        "## Issue 32: the Go client against redsync and bsm/redislock (ratios within this run)",
        "",
        "Every Go side runs its N clients in one process (bench/peers/go), each client with a "
        "go-redis client of its own. bsm/redislock waits as its example does (a linear "
        "backoff between tries, until the TTL when the context has no deadline, then the client "
        "asks again); it does not renew.",
        issue32(runs, results.get("dead_holder", [])),
        "",
        "## A holder killed mid-hold",
        "",
        "A holder takes the lock (hold: 10 min) and is SIGKILLed; a waiter queued behind it "
        "measures the time from the kill to its grant. Our holder asked with a TTL of 10 s (the "
        "harness does not renew; the Go client renews it every 3.3 s); Redisson's holder runs its "
        "watchdog (30 s lease, renewed every 10 s); redsync's lock expires after its default 8 s, "
        "bsm/redislock's after the 10 s it was asked for.",
        "",
        dead_table(results.get("dead_holder", [])),
        "",
        "## A waiter killed in the queue",
        "",
        "For the fair locks: a holder that keeps the lock 2 s at a time, a waiter queued behind "
        "it and SIGKILLed there, and a second waiter queued behind that one, which measures the "
        "time from the kill to its grant (the holder releases within 2 s of the kill). RFairLock "
        "keeps a dead waiter's place until its wait timeout (`fairLockWaitTimeout`, 300 s by "
        "default in Redisson 4); ours drops a waiter when its connection closes.",
        "",
        dead_waiter_table(results.get("dead_waiter", [])),
        "",
        MARKER,
    ]
    with open(path, "w") as f:
        f.write("\n".join(parts) + (kept if kept else "\n"))
