"""An example value for every setting, shown in the example column of `docs/config.md`.

Kept apart from `catalog.py` (one line per name here, one declaration there) so the
catalog stays readable; `tests/unit/test_settings_examples.py` checks that every setting has
an example and that its own parser accepts it, so an example can never show a form the
daemon refuses. Credentials are shaped like the real thing and obviously fake.
"""

from __future__ import annotations

EXAMPLES: dict[str, str] = {
    # model provider
    "PROVIDER": "openrouter",
    "PROVIDER_FALLBACKS": "phi4_local,claude_code",
    "CODEX_COMMAND": "codex exec --skip-git-repo-check --sandbox read-only -m o4-mini -",
    "CLAUDE_COMMAND": "claude -p --output-format text --model sonnet",
    "CLI_PROVIDER_TIMEOUT_S": "600",
    "OPENROUTER_API_KEY": "sk-or-v1-0123456789abcdef…",
    "OPENROUTER_MODEL": "anthropic/claude-sonnet-4",
    "OPENROUTER_BASE_URL": "https://openrouter.ai/api/v1",
    "PHI4_BASE_URL": "http://127.0.0.1:8080/v1",
    "PHI4_MODEL": "phi-4-mini-instruct",
    "PROVIDER_TIMEOUT_S": "60",
    "PROVIDER_MAX_RETRIES": "5",
    "PROVIDER_RETRY_BASE_MS": "500",
    # local model
    "LOCAL_MODEL": "off",
    "LOCAL_MODEL_PYTHON": "/opt/soulflow-local/bin/python",
    "LOCAL_MODEL_PATH": "/models/Phi-4-mini-instruct-Q4_K_M.gguf",
    "LOCAL_MODEL_COMMAND": "llama-server --port {port} -m {model} --alias {alias}",
    "LOCAL_MODEL_NAME": "phi4-mini",
    "LOCAL_MODEL_PORT": "8081",
    "LOCAL_MODEL_CTX": "8192",
    "LOCAL_MODEL_THREADS": "4",
    "LOCAL_MODEL_CHAT_FORMAT": "chatml",
    "LOCAL_MODEL_STARTUP_TIMEOUT_S": "300",
    # agent
    "AGENT_CONCURRENCY": "4",
    "AGENT_HISTORY_MESSAGES": "40",
    "MODEL_PRICES": "openai/gpt-4o=2.5/10,phi4=0/0",
    "WORKSPACE_TIMEZONE": "Europe/Berlin",
    "AGENT_MAX_TURNS": "20",
    "AGENT_MAX_CONTEXT_TOKENS": "32000",
    "TASK_MAX_PARALLEL": "2",
    "TASK_PROGRESS_INTERVAL_S": "10",
    "MEMORY_CONSOLIDATION_THRESHOLD": "100",
    "MEMORY_CONSOLIDATION_KEEP_LAST": "30",
    "WEB_FETCH_ALLOW_PRIVATE": "true",
    "WEB_FETCH_ALLOWED_HOSTS": "wiki.internal,grafana.internal:3000",
    "MAX_INBOUND_CHARS": "20000",
    "CHAT_DISK_QUOTA_MB": "1024",
    "CHAT_DISK_QUOTA_FILES": "50000",
    "EXEC_DISK_QUOTA_MB": "256",
    "EXEC_DISK_QUOTA_FILES": "10000",
    # outbound delivery
    "OUTBOUND_CONCURRENCY": "32",
    "OUTBOUND_MAX_ATTEMPTS": "12",
    "OUTBOUND_INLINE_RETRIES": "1",
    "OUTBOUND_RETRY_BASE_MS": "2000",
    "OUTBOUND_RETRY_MAX_MS": "600000",
    "LOCAL_SEND_INTERVAL_MS": "250",
    # durability
    "JOURNAL_FSYNC": "always",
    "JOURNAL_FSYNC_INTERVAL_MS": "200",
    "SHUTDOWN_GRACE_S": "30",
    # Slack
    "SLACK_BOT_TOKEN": "xoxb-0000000000-0000000000000-xxxxxxxxxxxxxxxxxxxxxxxx",
    "SLACK_APP_TOKEN": "xapp-1-A0000000000-0000000000000-xxxxxxxx…",
    "SLACK_DEFAULT_CHANNEL": "C0123456789",
    "SLACK_POLL_INTERVAL_MS": "5000",
    "SLACK_API_URL": "https://slack.com/api/",
    "SLACK_ALLOWED_USERS": "U01ABCDEF23,U04GHIJKL56",
    "SLACK_ADMIN_USERS": "U01ABCDEF23",
    # Telegram
    "TELEGRAM_BOT_TOKEN": "123456789:AAE-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "TELEGRAM_DEFAULT_CHAT_ID": "-1001234567890",
    "TELEGRAM_API_URL": "http://127.0.0.1:8081",
    "TELEGRAM_ALLOWED_USERS": "11111111,22222222",
    "TELEGRAM_ADMIN_USERS": "11111111",
    # Discord
    "DISCORD_BOT_TOKEN": "MTAxxxxxxxxxxxxxxxxxxxxx.Gxxxxx.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "DISCORD_DEFAULT_CHANNEL": "1234567890123456789",
    "DISCORD_API_URL": "https://discord.com/api/v10",
    "DISCORD_GATEWAY_URL": "wss://gateway.discord.gg",
    "DISCORD_ALLOWED_USERS": "*",
    "DISCORD_ADMIN_USERS": "123456789012345678",
    # channels
    "CHANNEL_GROUPING_ENABLED": "true",
    "CHANNEL_GROUPING_WINDOW_MS": "3000",
    "CHANNEL_GROUPING_MAX": "10",
    "CHANNEL_FOLD_MAX": "1",
    "CHANNEL_STALL_TIMEOUT_S": "300",
    "CHANNEL_RESTART_AFTER_FAILURES": "3",
    "CHANNEL_TYPING_REFRESH_S": "8",
    "CHANNEL_READ_ACK_INTERVAL_S": "0",
    "CHANNEL_READ_ACK_BACKLOG": "5",
    "CHANNEL_SEND_INTERVAL_MS": "1500",
    "CHANNEL_POLL_TIMEOUT_S": "50",
    "MAX_DOWNLOAD_MB": "100",
    "REFUSAL_COOLDOWN_S": "86400",
    # heartbeat and ops
    "HEARTBEAT_INTERVAL": "1h",
    "HEARTBEAT_CHAT": "telegram:-1001234567890",
    "HEARTBEAT_HISTORY_MESSAGES": "10",
    "HEARTBEAT_CONSOLIDATE_AFTER": "48",
    "OPS_TICK_S": "60",
    "OPS_RUN_STUCK_AFTER_S": "1800",
    "OPS_CHANNEL_STALL_AFTER_S": "900",
    "OPS_NOTICE_AFTER_S": "300",
    "OPS_NOTICE_INTERVAL_S": "7200",
    "OPS_DECISION_DEDUPE_S": "0",
    # security
    "SOULFLOW_MASTER_KEY_FILE": "/etc/soulflow/master.key",
    # dashboard
    "DASHBOARD_ENABLED": "false",
    "DASHBOARD_HOST": "0.0.0.0",
    "DASHBOARD_PORT": "8080",
    "DASHBOARD_TOKEN": "a-long-random-string-from-openssl-rand-hex-32",
    "DASHBOARD_MAX_CONNECTIONS": "512",
    "DASHBOARD_MAX_CONNECTIONS_PER_IP": "16",
    "DASHBOARD_HEADER_TIMEOUT_S": "5",
    "DASHBOARD_ALLOWED_HOSTS": "soulflow.example.com,soulflow.lan:8443",
    # storage backend
    "SOULFLOW_BACKEND": "redis",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "SOULFLOW_NODE_ID": "node-a",
    "REDIS_KEY_PREFIX": "prod-soulflow:",
    "REDIS_PARTITIONS": "32",
    "REDIS_LEASE_TTL_S": "10",
    # logging
    "LOG_LEVEL": "debug",
    "LOG_FORMAT": "json",
}
