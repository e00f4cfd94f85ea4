// Small DOM helpers. Everything the daemon sends is inserted as text (textContent), never as
// markup: a chat message, a tool argument or an error is hostile input.
"use strict";

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

export function button(label, cls, onClick, data = {}) {
  const b = el("button", cls, label);
  b.type = "button";
  for (const [k, v] of Object.entries(data)) b.dataset[k] = v;
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await onClick(); } finally { b.disabled = false; }
  });
  return b;
}

// "just now", "42 s ago", "3 min ago", "2 h ago", "5 d ago"; "in 4 min" for the future.
export function ago(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds) || seconds <= 0) return "never";
  const delta = Date.now() / 1000 - seconds;
  const span = Math.abs(delta);
  let text;
  if (span < 5) return delta >= 0 ? "just now" : "in a moment";
  if (span < 60) text = Math.round(span) + " s";
  else if (span < 3600) text = Math.round(span / 60) + " min";
  else if (span < 86400) text = Math.round(span / 3600) + " h";
  else text = Math.round(span / 86400) + " d";
  return delta >= 0 ? text + " ago" : "in " + text;
}

export function isoToEpoch(iso) {
  if (!iso) return null;
  const t = Date.parse(iso);
  return isNaN(t) ? null : t / 1000;
}

export function timeEl(seconds) {
  const t = el("time", "", ago(seconds));
  if (seconds) { t.dateTime = new Date(seconds * 1000).toISOString(); t.title = new Date(seconds * 1000).toLocaleString(); t.dataset.at = seconds; }
  return t;
}

// Replace a list's children with items, or with a sentence saying what to do when empty.
export function fill(container, items, emptyText) {
  if (!items.length) { container.replaceChildren(el("div", "empty", emptyText)); return; }
  container.replaceChildren(...items);
}

export function item({ title, sub = [], code = null, actions = [], cls = "" }) {
  const row = el("div", "item " + cls);
  const main = el("div", "main");
  if (title instanceof Node) main.append(title); else main.append(el("div", "title", title));
  for (const line of sub) if (line) main.append(line instanceof Node ? line : el("div", "sub", line));
  if (code) main.append(el("span", "code", code));
  row.append(main);
  if (actions.length) { const box = el("div", "actions"); box.append(...actions); row.append(box); }
  return row;
}

// Refresh every relative time on the page (called each few seconds).
export function refreshTimes(root = document) {
  for (const t of root.querySelectorAll("time[data-at]")) t.textContent = ago(Number(t.dataset.at));
}
