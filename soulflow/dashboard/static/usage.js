// The usage card: today's model tokens and cost, by source, chat and user (/api/state "usage").
// Every value is inserted as text (el/textContent): chat and user ids come from chats.
"use strict";

import { el, fill, item, patchChildren } from "/static/render.js";

const usd = n => "$" + Number(n || 0).toFixed(4);
const tokens = t => `${t.calls} calls · ${t.prompt_tokens} prompt + ${t.completion_tokens} completion tokens`;

function group(key, title, rows, label) {
  const box = el("div", "usage-group");
  box.dataset.key = key;
  box.append(el("h3", "", title));
  const list = el("div", "list");
  fill(list, (rows || []).slice(0, 10).map(r => item({
    key: r.key || "(none)", title: `${label(r.key)} · ${usd(r.cost_usd)}`, sub: [tokens(r)] })),
    "nothing yet");
  box.append(list);
  return box;
}

export function renderUsage(container, s) {
  const u = s.usage;
  if (!container) return;
  if (!u || !u.total) { fill(container, [], "Usage is not available right now."); return; }
  const by = u.by || {};
  const names = u.names || {};
  const person = k => (k && names[k] ? `${names[k]} (${k})` : k);
  const head = el("div", "title", `Today (${u.today}): ${usd(u.total.cost_usd)} · ${tokens(u.total)}`);
  // patched in place like every card: a refresh keeps the nodes (and a reader's place)
  patchChildren(container, [head,
    group("source", "By source", by.source, k => k),
    group("chat", "By chat", by.chat, k => k || "(none)"),
    group("user", "By user", by.user,
          k => person(k) || "(no person: cron, heartbeat, consolidation)")]);
}
