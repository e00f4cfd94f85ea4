// The usage card: today's model tokens and cost, by source, chat and user (/api/state "usage").
// Every value is inserted as text (el/textContent): chat and user ids come from chats.
"use strict";

import { el, fill, item } from "/static/render.js";

const usd = n => "$" + Number(n || 0).toFixed(4);
const tokens = t => `${t.calls} calls · ${t.prompt_tokens} prompt + ${t.completion_tokens} completion tokens`;

function group(title, rows, label) {
  const box = el("div", "usage-group");
  box.append(el("h3", "", title));
  const list = el("div", "list");
  fill(list, (rows || []).slice(0, 10).map(r => item({
    title: `${label(r.key)} · ${usd(r.cost_usd)}`, sub: [tokens(r)] })), "nothing yet");
  box.append(list);
  return box;
}

export function renderUsage(container, s) {
  const u = s.usage;
  if (!container) return;
  if (!u || !u.total) { fill(container, [], "Usage is not available right now."); return; }
  const by = u.by || {};
  const head = el("div", "title", `Today (${u.today}): ${usd(u.total.cost_usd)} · ${tokens(u.total)}`);
  container.replaceChildren(head,
    group("By source", by.source, k => k),
    group("By chat", by.chat, k => k || "(none)"),
    group("By user", by.user, k => k || "(no person: cron, heartbeat, consolidation)"));
}
