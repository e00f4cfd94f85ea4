"""Task graphs: multi-step work that runs for minutes or hours, pauses for approval and survives
restarts (model, validation, `run_task_loop`, TaskEngine, planner; the store is the backend's).
See docs/tasks.md."""

from soulflow.tasks.contracts import NodeCall
from soulflow.tasks.engine import TaskEngine
from soulflow.tasks.graph import GraphValidationError, execution_groups, validate_graph
from soulflow.tasks.model import (
    Choice,
    ConditionalEdge,
    NodeKind,
    NodeOutcome,
    NodeState,
    NodeStatus,
    OutcomeStatus,
    TaskDecisionError,
    TaskFenced,
    TaskGraph,
    TaskNode,
    TaskState,
    TaskStatus,
)
from soulflow.tasks.runner import NodeExecutors, TaskEvent, run_task_loop

__all__ = [
    "Choice",
    "ConditionalEdge",
    "GraphValidationError",
    "NodeCall",
    "NodeExecutors",
    "NodeKind",
    "NodeOutcome",
    "NodeState",
    "NodeStatus",
    "OutcomeStatus",
    "TaskDecisionError",
    "TaskEngine",
    "TaskEvent",
    "TaskFenced",
    "TaskGraph",
    "TaskNode",
    "TaskState",
    "TaskStatus",
    "execution_groups",
    "run_task_loop",
    "validate_graph",
]
