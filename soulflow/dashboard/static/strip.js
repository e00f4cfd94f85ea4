// The strip on top: what needs the operator, each a link to its section, and the sections
// that need them moved first. Counts come from the same /api/state the cards render.
"use strict";

import { el, patchChildren } from "/static/render.js";

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

// [{key, section, text, bad}] from one state, those that need the operator first
export function attention(s) {
  const approvals = (s.approvals || []).length;
  const dlq = (s.queues && s.queues.dlq) || 0;
  const quarantined = (s.queues && s.queues.inbound_dlq) || 0;
  const failing = (s.channels || []).filter(c => c.status === "failing");
  const providers = s.providers || [];
  const modelBad = !s.provider || (providers.length > 0 && providers.every(p => !p.healthy));
  const rows = [
    { key: "approvals", section: "sec-approvals", bad: approvals > 0,
      text: approvals ? `${plural(approvals, "approval", "approvals")} pending` : "no approval pending" },
    { key: "dlq", section: "sec-dlq", bad: dlq + quarantined > 0,
      text: dlq || !quarantined ? plural(dlq, "dead letter", "dead letters") + (quarantined ? `, ${quarantined} quarantined` : "")
                                : `${quarantined} quarantined` },
    { key: "channels", section: "sec-channels", bad: failing.length > 0,
      text: failing.length ? `${plural(failing.length, "channel", "channels")} failing (${failing.map(c => c.name).join(", ")})`
                           : "no channel failing" },
    { key: "model", section: "sec-providers", bad: modelBad,
      text: !s.provider ? "model: none configured" : `model: ${s.provider}${modelBad ? " (failing)" : ""}` },
  ];
  return [...rows.filter(r => r.bad), ...rows.filter(r => !r.bad)];
}

export function renderStrip(nav, rows) {
  const links = rows.map(r => {
    const a = el("a", "chip " + (r.bad ? "bad" : "ok"), r.text);
    a.href = "#" + r.section;
    a.dataset.key = r.key;
    return a;
  });
  patchChildren(nav, links);
}

// Move the sections that need the operator to the top of the first column, in the strip's
// order; the others go back to where the page put them. Moving a node that holds the focus
// loses it, so the focus is given back to the same node.
export function orderSections(rows, home) {
  const first = document.getElementById("col-a");
  const wanted = new Set(rows.filter(r => r.bad).map(r => r.section));
  const focused = document.activeElement;
  const place = (parent, nodes) => nodes.forEach((node, index) => {
    if (parent.children[index] !== node) parent.insertBefore(node, parent.children[index] || null);
  });
  const urgent = rows.filter(r => r.bad).map(r => document.getElementById(r.section));
  for (const [colId, ids] of Object.entries(home)) {
    const col = document.getElementById(colId);
    const rest = ids.filter(id => !wanted.has(id)).map(id => document.getElementById(id));
    place(col, col === first ? [...urgent, ...rest] : rest);
  }
  if (focused && focused !== document.activeElement && document.contains(focused)) focused.focus();
}
