"""The pictures of PEERS.md, drawn from target/peers/results.json:

- peers-h10.png and peers-h0.png: acquisitions/s and p99 wait against N, one line
  per side, for H = 10 ms and H = 0;
- peers-cpu.png: server CPU per acquisition, bars per side, one panel per H.

Run alone (`python bench/peers/plot.py [results.json [out_dir]]`) it redraws them."""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from report import LABELS  # noqa: E402

STYLE = {
    "ours-rust": dict(color="#c0392b", marker="o", linewidth=2.6),
    "ours-redis-py": dict(color="#e67e22", marker="o", linewidth=2.6),
    "ours-python": dict(color="#f1c40f", marker="o", linewidth=2.6),
    "redis-py-lock": dict(color="#2471a3", marker="s", linestyle="--"),
    "redis-py-lock-1ms": dict(color="#5dade2", marker="s"),
    "python-redis-lock": dict(color="#239b56", marker="^"),
    "pottery-redlock": dict(color="#7d3c98", marker="D"),
    "etcd3-lock": dict(color="#566573", marker="x", linestyle=":"),
    "redisson-rlock": dict(color="#b7950b", marker="v"),
    "redisson-fairlock": dict(color="#7e5109", marker="v", linestyle="--"),
    "redsync": dict(color="#17a589", marker="P", linestyle="--"),
    "redsync-tuned": dict(color="#48c9b0", marker="P"),
    "ours-rust-limit3": dict(color="#922b21", marker="*", linestyle="-."),
    "redisson-semaphore": dict(color="#d4ac0d", marker="*", linestyle="-."),
    "ours-rust-rw": dict(color="#641e16", marker="h", linestyle=""),
    "redisson-rwlock": dict(color="#f4d03f", marker="h", linestyle=""),
}


def sides_of(runs):
    seen = []
    for r in runs:
        if r["side"] not in seen:
            seen.append(r["side"])
    return sorted(seen, key=lambda s: list(LABELS).index(s) if s in LABELS else 99)


def against_n(results, hold_ms, path):
    runs = [r for r in results["runs"] if r["hold_ms"] == hold_ms]
    if not runs:
        return None
    fig, (rate_ax, wait_ax) = plt.subplots(1, 2, figsize=(13, 5.2))
    for side in sides_of(runs):
        points = sorted((r["n"], r["rate"], r["p99_ms"]) for r in runs if r["side"] == side)
        ns = [p[0] for p in points]
        style = STYLE.get(side, {})
        rate_ax.plot(ns, [p[1] for p in points], label=LABELS.get(side, side), **style)
        wait_ax.plot(ns, [max(p[2], 1e-3) for p in points], label=LABELS.get(side, side), **style)
    ns = sorted({r["n"] for r in runs})
    for ax in (rate_ax, wait_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("clients contending for the lock (N)")
        ax.grid(True, which="both", alpha=0.3)
    if hold_ms == 0:
        rate_ax.set_yscale("log")  # etcd is two orders of magnitude below
    else:
        # Semaphore and read-write rows go past one lock's ceiling.
        rate_ax.set_ylim(0, max([1000 / hold_ms * 1.15] + [r["rate"] * 1.1 for r in runs]))
    rate_ax.set_ylabel("acquisitions per second (more is better)")
    rate_ax.set_title(f"Throughput, hold {hold_ms} ms")
    if hold_ms > 0:
        rate_ax.axhline(1000 / hold_ms, color="black", linewidth=0.8, alpha=0.5)
        rate_ax.annotate(f"ceiling: 1 / hold = {1000 / hold_ms:.0f}/s", (ns[0], 1000 / hold_ms * 1.08), fontsize=8)
    wait_ax.set_yscale("log")
    wait_ax.set_ylabel("p99 wait per acquisition, ms (less is better)")
    wait_ax.set_title(f"p99 wait, hold {hold_ms} ms")
    handles, labels = rate_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.suptitle(f"One lock, N clients, acquire → hold {hold_ms} ms → release "
                 f"({results['machine']['nproc']}-core shared machine, {results['machine']['date']})", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cpu_bars(results, path):
    runs = results["runs"]
    holds = sorted({r["hold_ms"] for r in runs})
    sides = sides_of(runs)
    fig, axes = plt.subplots(1, len(holds), figsize=(5.2 * len(holds), 5.4), squeeze=False)
    width = 0.8 / max(len(sides), 1)
    for ax, hold_ms in zip(axes[0], holds):
        ns = sorted({r["n"] for r in runs if r["hold_ms"] == hold_ms})
        for i, side in enumerate(sides):
            values = {r["n"]: r["cpu_us"] for r in runs if r["hold_ms"] == hold_ms and r["side"] == side}
            xs = [j + (i - (len(sides) - 1) / 2) * width for j in range(len(ns))]
            ax.bar(xs, [values.get(n, 0) for n in ns], width, label=LABELS.get(side, side),
                   color=STYLE.get(side, {}).get("color"))
        ax.set_xticks(range(len(ns)), [f"N={n}" for n in ns])
        ax.set_yscale("log")
        ax.set_title(f"hold {hold_ms} ms")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("server CPU per acquisition, µs (less is better)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.suptitle("Server CPU per acquisition (redis-server from INFO cpu; etcd from /proc)", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(results, out_dir):
    drawn = [
        against_n(results, 10, os.path.join(out_dir, "peers-h10.png")),
        against_n(results, 0, os.path.join(out_dir, "peers-h0.png")),
        cpu_bars(results, os.path.join(out_dir, "peers-cpu.png")),
    ]
    return [p for p in drawn if p]


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../target/peers/results.json")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "..")
    with open(source) as f:
        for path in draw(json.load(f), out):
            print("wrote", path)
