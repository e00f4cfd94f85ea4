// Small DOM helpers. Everything the daemon sends is inserted as text (textContent), never as
// markup: a chat message, a tool argument or an error is hostile input.
//
// Cards are redrawn by building what they should look like and then *patching* the page to
// match (`patch`, `fill`), not by replacing it: a node that keeps its place (same tag, same
// `data-key` when it has one) is kept and only its text and attributes change. So a focused
// Approve button stays the focused button across refreshes, a click never lands on a node
// that vanished under the pointer, and a screen reader is not told the card changed when it
// did not. Any card can use it: build the rows with `item({key, ...})` and hand them to `fill`.
"use strict";

export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// A button whose action is looked up when clicked: `patch` moves the newest action onto the
// kept node, so a kept button always does what the latest render says. `key` (default: the
// label) names what it means; a button whose meaning changes (Pause → Resume) is a new node.
export function button(label, cls, onClick, data = {}, key = label) {
  const b = el("button", cls, label);
  b.type = "button";
  b.dataset.key = key;
  for (const [k, v] of Object.entries(data)) b.dataset[k] = v;
  b.soulflowAction = onClick;
  b.addEventListener("click", async () => {
    if (b.dataset.busy) return;
    b.dataset.busy = "1";
    b.setAttribute("aria-disabled", "true");  // not `disabled`: that would drop the focus
    try { await b.soulflowAction(); } finally { delete b.dataset.busy; b.removeAttribute("aria-disabled"); }
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

// -- patching ----------------------------------------------------------------------------------

const BUSY_ATTRIBUTES = new Set(["data-busy", "aria-disabled"]);  // a click in progress owns them

function sameKind(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  return a.namespaceURI === b.namespaceURI && a.tagName === b.tagName &&
    (a.dataset ? a.dataset.key : undefined) === (b.dataset ? b.dataset.key : undefined);
}

function patchNode(old, fresh) {
  if (old.nodeType !== Node.ELEMENT_NODE) {
    if (old.nodeValue !== fresh.nodeValue) old.nodeValue = fresh.nodeValue;
    return;
  }
  const busy = old.dataset && old.dataset.busy;
  for (const { name } of [...old.attributes])
    if (!fresh.hasAttribute(name) && !(busy && BUSY_ATTRIBUTES.has(name))) old.removeAttribute(name);
  for (const { name, value } of [...fresh.attributes])
    if (old.getAttribute(name) !== value) old.setAttribute(name, value);
  if ("soulflowAction" in fresh) old.soulflowAction = fresh.soulflowAction;
  patchChildren(old, [...fresh.childNodes]);
}

// Make `container`'s children look like `wanted` (fresh nodes), keeping every old child that
// matches one (same tag and data-key) and moving it only when its place changed.
export function patchChildren(container, wanted) {
  const pool = [...container.childNodes];
  const used = new Set();
  const keep = wanted.map(fresh => {
    const old = pool.find(o => !used.has(o) && sameKind(o, fresh));
    if (!old) return fresh;
    used.add(old);
    patchNode(old, fresh);
    return old;
  });
  const focused = document.activeElement;
  const lost = pool.some(old => !used.has(old) && old.contains(focused));
  for (const old of pool) if (!used.has(old)) old.remove();
  keep.forEach((node, index) => {
    if (container.childNodes[index] !== node) container.insertBefore(node, container.childNodes[index] || null);
  });
  // the focused control went (its approval was decided): the focus goes to the section's
  // heading, not to <body> (the keyboard would start again from the top), and not to the
  // next button (a second Enter would decide an approval nobody looked at)
  if (lost) container.closest("section")?.querySelector("h2")?.focus();
}

// A list's rows (from `item`), or a sentence saying what to do when it is empty.
export function fill(container, items, emptyText) {
  patchChildren(container, items.length ? items : [el("div", "empty", emptyText)]);
}

// One row of a card. `key` (an approval's id, a job's id) ties the row to what it shows, so
// rows added or removed around it leave it, and its focused button, where they are.
export function item({ key = null, title, sub = [], code = null, actions = [], cls = "" }) {
  const row = el("div", "item " + cls);
  if (key !== null) row.dataset.key = key;
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
