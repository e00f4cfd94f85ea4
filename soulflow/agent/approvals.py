"""How people decide approval requests: words in English and Korean, emoji, reactions.

A message decides an approval only when it is nothing but a decision ("approve", "네",
"✅", optionally with the approval id), so a normal sentence that happens to contain "no"
is never taken as a denial.

Who may decide is bound to people: the user whose message started the run (recorded in the
run's journal, so the binding survives a restart), an admin of that platform
(<PLATFORM>_ADMIN_USERS), or the local operator (the terminal and dashboard chat). Anyone else
is refused and nothing changes. An approval a tool asked for as admins-only (a change to the
operator's files, `ApprovalNeed.admins_only`) leaves out the requester: she could otherwise
plant standing instructions for every chat by approving her own write.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from soulflow.contracts import ChatRef

APPROVE, DENY, DEFER, CANCEL, CLARIFY = "approve", "deny", "defer", "cancel", "clarify"

_WORDS: dict[str, tuple[str, ...]] = {
    APPROVE: ("approve", "approved", "yes", "y", "ok", "okay", "go", "go ahead", "lgtm",
              "allow", "승인", "허용", "네", "예", "응", "좋아", "진행", "✅", "👍", "👌", "✔️",
              "✔"),
    DENY: ("deny", "denied", "no", "n", "reject", "refuse", "don't", "거부", "거절", "아니",
           "아니오", "아니요", "안돼", "❌", "👎", "✖️"),
    DEFER: ("defer", "later", "wait", "hold", "not now", "보류", "나중에", "대기", "⏸", "⏸️",
            "⏳", "🕐"),
    CANCEL: ("cancel", "abort", "취소", "그만", "🚫", "🛑"),
    CLARIFY: ("clarify", "why", "why?", "explain", "details", "what?", "?", "설명", "왜",
              "왜?", "자세히", "🤔", "❓"),
}
_BY_WORD = {word: decision for decision, words in _WORDS.items() for word in words}

# platform reaction names (Slack names, Discord/Telegram unicode) to decisions
_REACTIONS = {
    "white_check_mark": APPROVE, "heavy_check_mark": APPROVE, "+1": APPROVE,
    "thumbsup": APPROVE, "ok_hand": APPROVE, "✅": APPROVE, "👍": APPROVE, "👌": APPROVE,
    "x": DENY, "-1": DENY, "thumbsdown": DENY, "❌": DENY, "👎": DENY,
    "double_vertical_bar": DEFER, "hourglass": DEFER, "hourglass_flowing_sand": DEFER,
    "⏸️": DEFER, "⏸": DEFER, "⏳": DEFER,
    "no_entry_sign": CANCEL, "🚫": CANCEL,
    "thinking_face": CLARIFY, "question": CLARIFY, "🤔": CLARIFY, "❓": CLARIFY,
}

_ID = re.compile(r"\[?\b(ap_[0-9a-f]{8})\b\]?")


def parse_decision(text: str) -> tuple[str, str | None] | None:
    """`(decision, approval_id or None)` if the whole message is a decision, else None."""
    match = _ID.search(text)
    approval_id = match.group(1) if match else None
    rest = _ID.sub(" ", text).strip().strip(".!").strip().casefold()
    decision = _BY_WORD.get(rest)
    return (decision, approval_id) if decision else None


def parse_reaction(emoji: str | None) -> str | None:
    if not emoji:
        return None
    return _REACTIONS.get(emoji.strip(":")) or _REACTIONS.get(emoji.strip(":").rstrip("\ufe0f"))


LOCAL_PROVIDER = "local"  # the operator's own chat: always allowed to decide

AdminCheck = Callable[[str, str], bool]  # (provider, user_id) -> is an admin


def _no_admins(provider: str, user_id: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Decider:
    """The person replying or reacting to an approval request."""

    provider: str
    user_id: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Requester:
    """The person whose message started the run; `user_id` empty when nobody did (a cron
    job's run), which leaves the decision to admins and the local operator."""

    provider: str
    user_id: str
    name: str = ""

    @classmethod
    def of_run(cls, chat: ChatRef) -> Requester:
        """From the run's recorded chat (`ChatRef.from_dict` already gives a run recorded
        before `requester_id` existed its sender, the same person)."""
        return cls(chat.provider, chat.requester_id, chat.sender_name)

    @property
    def label(self) -> str:
        return self.name or self.user_id or "the person who asked"


@dataclass(frozen=True, slots=True)
class ApproverPolicy:
    """Only the requester, an admin or the local operator may decide an approval; only an admin
    or the local operator one that is ``admins_only``."""

    is_admin: AdminCheck = field(default=_no_admins)

    def may_decide(self, requester: Requester, decider: Decider, *,
                   admins_only: bool = False) -> bool:
        if decider.provider == LOCAL_PROVIDER or self.is_admin(decider.provider, decider.user_id):
            return True
        if admins_only:
            return False
        return bool(requester.user_id) and decider.provider == requester.provider and \
            decider.user_id == requester.user_id


def admins_only_text(reason: str) -> str:
    """How an admins-only approval is announced, and refused to anyone else."""
    return f"Only an admin can approve this: {reason.rstrip('.') or 'it is risky'}."


def refusal_text(requester: Requester, *, admins_only: bool = False, reason: str = "") -> str:
    """The answer to someone who may not decide (`admins_only`: the approval's own rule)."""
    if admins_only:
        return admins_only_text(reason)
    return f"Only {requester.label} or an admin can decide this approval."
