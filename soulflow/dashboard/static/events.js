// Live events as sentences with an icon, not raw JSON. The icons are plain symbols that
// every system font has (an emoji font is not a given on a server's browser).
"use strict";

const quote = (text, n = 140) => {
  const t = String(text || "").replace(/\s+/g, " ").trim();
  return "“" + (t.length > n ? t.slice(0, n - 1) + "…" : t) + "”";
};
const chat = d => `${d.provider || d.channel || "?"}:${d.chat_id || "?"}`;

const ACTION_WORDS = {
  approve: "approved", deny: "denied", cancel_run: "cancelled run", cancel_task: "cancelled task",
  "dlq.replay": "replayed dead letter", "dlq.purge": "purged dead letter",
  "cron.run": "ran cron job", "cron.disable": "paused cron job", "cron.enable": "resumed cron job",
  "cron.add": "added cron job", "cron.rm": "removed cron job",
};

// [icon, sentence, bad?] for one exported hub event
export function describe(ev) {
  const d = ev.data || {};
  switch (ev.kind) {
    case "inbound.received":
      return ["↓", `${d.sender_name || d.sender_id || "Someone"} wrote in ${chat(d)}: ${quote(d.text)}`, false];
    case "agent.reply":
      return ["↑", `Replied in ${chat(d)}: ${quote(d.text)}`, false];
    case "local.message":
      if (d.edits) return ["↑", `The agent's reply in local:${d.chat_id} now reads ${quote(d.content)}`, false];
      return [d.role === "user" ? "↓" : "↑", `${d.role === "user" ? "You" : "The agent"} in local:${d.chat_id}: ${quote(d.content)}`, false];
    case "outbound.sent":
      return ["✓", `Delivered a message to ${chat(d)}.`, false];
    case "outbound.retry":
      return ["↻", `Sending to ${chat(d)} failed (${d.reason === "rate_limited" ? "rate limited" : "temporary error"}); retry ${d.attempt} in ${d.delay_s} s.`, false];
    case "outbound.dead":
      return ["✗", `A message to ${chat(d)} could not be delivered and went to the dead-letter queue: ${d.error}`, true];
    case "inbound.quarantined":
      return ["⚠", `A message from ${chat(d)} was set aside at the ${d.stage} stage: ${d.error}`, true];
    case "operator.action":
      return ["⚙", `The ${d.by || "operator"} ${ACTION_WORDS[d.action] || d.action} ${d.tool ? d.tool + " " : ""}${d.target || ""}.`, false];
    case "workflow":
      return ["◆", `${d.summary || d.phase || "Workflow event"}${d.task_id ? " (task " + d.task_id + ")" : ""}`, d.phase === "failed"];
    default: {
      const bits = Object.entries(d).filter(([, v]) => typeof v !== "object").slice(0, 4)
        .map(([k, v]) => `${k.replace(/_/g, " ")} ${String(v).slice(0, 60)}`);
      return ["•", `${ev.kind.replace(/[._]/g, " ")}${bits.length ? ": " + bits.join(", ") : ""}`, false];
    }
  }
}
