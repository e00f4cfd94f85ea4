"""The soak's bookkeeping (bench/soak.py drives the run): the local chat's side (posting over
`/api/chat`, counting the answers in its transcripts), how the daemon's inbound journal says
each numbered message ended (and, for what a compaction took from the journal before the run's
end, its session), the steady window of the reports, and the size of `runtime/`.
The platforms' side is counted by their fakes (`bench/_fake_host.py`, `tally`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._journal_tail import JournalTail

PREFIX = "soak"
NUMBER = re.compile(rf"\b{PREFIX} (\d+)\b")


@dataclass
class LocalChats:
    """The local chat's side: post over `/api/chat`, count replies in the transcripts
    (`runtime/local/<chat>.jsonl`, read incrementally)."""

    workspace: Path
    chats: int
    posted: set[int] = field(default_factory=set)
    counts: dict[int, int] = field(default_factory=dict)
    _offsets: dict[str, int] = field(default_factory=dict)
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    def post(self, url: str, index: int, number: int) -> bool:
        try:
            response = self._http.post(url + "/api/chat", json={
                "chat_id": f"soak-{index % self.chats}", "text": f"{PREFIX} {number}"})
        except httpx.HTTPError:
            return False  # the daemon is restarting: a person would write again later
        if response.status_code != 202:
            return False
        self.posted.add(number)
        return True

    def tally(self, full: bool = False) -> dict[str, Any]:
        for path in (self.workspace / "runtime" / "local").glob("soak-*.jsonl"):
            offset = self._offsets.get(path.name, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path.name] = offset + end
            for line in data[:end].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("role") == "assistant":
                    for n in {int(m) for m in NUMBER.findall(str(record.get("content", "")))}:
                        self.counts[n] = self.counts.get(n, 0) + 1
        missing = sorted(n for n in self.posted if n not in self.counts)
        duplicates = sorted(n for n in self.posted if self.counts.get(n, 0) > 1)
        return {"posted": len(self.posted), "answered": len(self.posted) - len(missing),
                "duplicates": duplicates[:50], "duplicate_count": len(duplicates),
                "missing": missing if full else missing[:50], "missing_count": len(missing)}

    def close(self) -> None:
        self._http.close()


@dataclass
class JournalStatuses:
    """How the daemon's inbound journal says each numbered message ended (read on, across
    compactions, which rewrite the file)."""

    path: Path
    status: dict[int, str] = field(default_factory=dict)
    _numbers: dict[str, int] = field(default_factory=dict)
    _tail: JournalTail | None = None

    def refresh(self) -> None:
        self._tail = self._tail or JournalTail(self.path)
        for record in self._tail.new_records():
            if record.get("op") == "in" and isinstance(record.get("msg"), dict):
                msg = record["msg"]
                if found := NUMBER.search(str(msg.get("text", ""))):
                    key = f"{msg.get('provider')}:{msg.get('chat_id')}:{msg.get('message_id')}"
                    self._numbers[key] = int(found.group(1))
            elif record.get("op") == "done" and record.get("key") in self._numbers:
                self.status[self._numbers.pop(record["key"])] = str(record.get("status"))


def session_statuses(sessions: Path, numbers: set[int]) -> dict[int, str]:
    """How the agent recorded the turns of `numbers` in the sessions (`runtime/sessions/`,
    never compacted): the status of the reply to the turn that carried each number (a folded
    turn carries several). The journal's compactions drop finished entries; a `/stop` that
    cancelled a numbered message's run in between would otherwise count as lost."""
    found: dict[int, str] = {}
    if not numbers:
        return found
    for path in sessions.glob("*.jsonl"):
        turn_of: dict[str, list[int]] = {}
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if '"inbound_key"' not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                key = str(record.get("inbound_key"))
                if record.get("role") == "user":
                    carried = [int(m.group(1)) for m in NUMBER.finditer(
                        str(record.get("content", "")))]
                    if wanted := [n for n in carried if n in numbers]:
                        turn_of[key] = wanted
                elif record.get("role") == "assistant" and key in turn_of:
                    for number in turn_of.pop(key):
                        found[number] = str(record.get("status"))
    return found


def steady_window(reports: list[dict[str, Any]], from_minute: float) -> dict[str, Any] | None:
    """The daemon life running at `from_minute`, from there to its last report: where a leak
    shows (earlier, caches are still filling; another life starts from scratch)."""
    sampled = [r for r in reports if r.get("rss_mib") is not None]
    start = next((r for r in sampled if r["minute"] >= from_minute), None)
    if start is None:
        return None
    rows = [r for r in sampled if r["life"] == start["life"] and r["minute"] >= start["minute"]]

    def span(key: str) -> list[Any]:
        values = [r[key] for r in rows if r.get(key) is not None]
        return [values[0], values[-1], min(values), max(values)] if values else []

    return {"life": start["life"], "from_minute": rows[0]["minute"],
            "to_minute": rows[-1]["minute"], "rss_mib": span("rss_mib"),
            "rss_growth_mib": round(rows[-1]["rss_mib"] - rows[0]["rss_mib"], 2),
            "fds": span("fds"), "connections": span("connections"), "tasks": span("tasks"),
            "cpu_ms_per_msg_first": rows[0].get("cpu_ms_per_msg"),
            "cpu_ms_per_msg_last": rows[-1].get("cpu_ms_per_msg")}


def tree_mib(path: Path) -> float:
    total = 0
    for item in path.rglob("*"):
        try:
            if item.is_file():
                total += item.stat().st_size
        except OSError:
            continue
    return total / 2**20
