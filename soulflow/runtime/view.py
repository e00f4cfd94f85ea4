"""What the dashboard reads of a running daemon, and the services its actions go through.

The dashboard sits above the runtime (it is built around one by soulflow.cli.wiring), so it
may know the daemon; it is typed against this `DaemonView` rather than `Runtime` itself, so
what it reaches is listed in one place and cannot be rebound from there (read-only
properties). `Runtime` satisfies the protocol as it is.
"""

from __future__ import annotations

from typing import Any, Protocol

from soulflow.agent.domain import AgentDomain
from soulflow.agent.usage import UsageMeter
from soulflow.backends.base import Backend, TaskStore
from soulflow.bus.bus import MessageBus
from soulflow.bus.traffic import TrafficCounters
from soulflow.channels.health import HealthBoard
from soulflow.channels.registry import ChannelRegistry
from soulflow.config import Settings
from soulflow.conversation.turns import Conversation
from soulflow.cron import CronService
from soulflow.decision.service import DecisionService
from soulflow.events.workflow import WorkflowEventService
from soulflow.providers.registry import ProviderRegistry
from soulflow.security.redact import Redactor
from soulflow.tasks.engine import TaskEngine
from soulflow.tasks.wiring import TaskServices
from soulflow.telemetry import Histogram


class DaemonView(Protocol):
    """The console's sections, /metrics and the operator's actions read these."""

    @property
    def settings(self) -> Settings: ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def started_at(self) -> float: ...

    # what runs: the agent's runs and approvals, the chats' conversation, the task graphs
    @property
    def agent(self) -> AgentDomain: ...

    @property
    def conversation(self) -> Conversation: ...

    @property
    def usage(self) -> UsageMeter:
        """Model tokens and cost, stored per day, chat, user and source."""

    @property
    def task_services(self) -> TaskServices: ...

    @property
    def task_engine(self) -> TaskEngine: ...

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def workflow(self) -> WorkflowEventService: ...

    @property
    def backend(self) -> Backend: ...

    # what it counts and keeps: traffic, channels, the bus, providers, cron, decisions
    @property
    def bus(self) -> MessageBus: ...

    @property
    def traffic(self) -> TrafficCounters: ...

    @property
    def run_durations(self) -> Histogram: ...

    @property
    def channels(self) -> ChannelRegistry: ...

    @property
    def health(self) -> HealthBoard: ...

    @property
    def providers(self) -> ProviderRegistry: ...

    @property
    def cron(self) -> CronService: ...

    @property
    def decisions(self) -> DecisionService: ...

    async def state(self) -> dict[str, Any]:
        """`/api/state`'s summary (soulflow/runtime/status.py)."""
