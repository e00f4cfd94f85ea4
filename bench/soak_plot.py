"""Draw a soak's curves (bench/soak.py's JSON lines) into one PNG: RSS, open fds and
connections, asyncio tasks, and CPU per message, per minute; restarts as dotted lines, the
steady window shaded.

    python bench/soak_plot.py soak.jsonl docs/soak-2h.png [--title "2 h at 20 msg/s"]

Needs matplotlib, which the daemon does not: `pip install '.[bench]'`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    rows, summary = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("summary"):
            summary = record
        else:
            rows.append(record)
    return rows, summary


def restart_minutes(rows: list[dict[str, Any]], summary: dict[str, Any] | None) -> list[float]:
    """When the daemon was restarted: the summary's schedule (`kill@3`), which also shows a
    restart before the first report; without a summary (a run cut short), the first report
    of each new life."""
    if summary and summary.get("restarts") is not None:
        return [float(item.partition("@")[2]) for item in summary["restarts"]]
    return [b["minute"] for a, b in zip(rows, rows[1:], strict=False)
            if b.get("life") != a.get("life")]


def plot(rows: list[dict[str, Any]], summary: dict[str, Any] | None, out: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    sampled = [r for r in rows if r.get("rss_mib") is not None]
    minutes = [r["minute"] for r in sampled]
    panels = (("RSS (MiB)", ("rss_mib",)), ("open fds / connections", ("fds", "connections")),
              ("asyncio tasks", ("tasks",)), ("CPU per message (ms)", ("cpu_ms_per_msg",)))
    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 10), sharex=True)
    restarts = restart_minutes(rows, summary)
    window = (summary or {}).get("steady") or {}
    for axis, (label, keys) in zip(axes, panels, strict=True):
        for key in keys:
            values = [r.get(key) for r in sampled]
            axis.plot(minutes, [v if v is not None else float("nan") for v in values],
                      marker=".", linewidth=1, label=key)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        for minute in restarts:
            axis.axvline(minute, color="grey", linestyle=":", linewidth=1)
        if window:
            axis.axvspan(window["from_minute"], window["to_minute"], color="green", alpha=0.06)
        if len(keys) > 1:
            axis.legend(loc="upper left")
        axis.set_ylim(bottom=0)
    axes[-1].set_xlabel("minute (dotted: daemon restarts; shaded: the steady window)")
    if window:
        title += (f" - steady window RSS {window['rss_mib'][0]:.1f} -> "
                  f"{window['rss_mib'][1]:.1f} MiB ({window['rss_growth_mib']:+.1f})")
    figure.suptitle(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--title", default="SoulFlow soak")
    args = parser.parse_args(argv)
    rows, summary = load(args.jsonl)
    if not rows:
        print(f"{args.jsonl}: no reports", file=sys.stderr)
        return 1
    plot(rows, summary, args.png, args.title)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
