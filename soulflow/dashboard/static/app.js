// The operator's console: renders /api/state, follows /api/events, sends the actions.
//
// Cards are patched in place (render.js): rows are keyed by what they show (an approval's
// id, a job's id), so a focused button keeps its node and its focus across refreshes.
"use strict";

import { api, post, followEvents, setToken, takeTokenFromAddress, tokenChanged, hasToken,
         NeedsToken, Unreachable } from "/static/api.js";
import { el, button, ago, isoToEpoch, timeEl, fill, item, refreshTimes, patchChildren } from "/static/render.js";
import { describe } from "/static/events.js";
import { drawChart } from "/static/chart.js";
import { attention, renderStrip, orderSections } from "/static/strip.js";
import { renderUsage } from "/static/usage.js";

const CHAT_ID = "dashboard";
const $ = id => document.getElementById(id);
let chatAfter = -1;
let refreshTimer = null;
let lastState = null;
let unreachableSince = null;   // epoch seconds: since when the daemon does not answer
const confirming = new Set();  // dead letters whose Purge waits for a second press
// where each section lives when nothing needs the operator (strip.js moves the others first)
const HOME = Object.fromEntries(["col-a", "col-b"].map(id =>
  [id, [...$(id).children].map(section => section.id)]));

function problem(text) { $("problems").append(el("div", "", text)); }

// -- token, staleness ------------------------------------------------------------------------

function askForToken(refused) {
  const form = $("token-form");
  $("token-note").textContent = refused
    ? "That token was refused. Paste the value of DASHBOARD_TOKEN from the daemon's .env (or open this page as /#token=…). It is kept in this tab only."
    : "This daemon is protected by DASHBOARD_TOKEN: paste its value from the daemon's .env (or open this page as /#token=…). It is kept in this tab only.";
  const first = form.hidden;
  form.hidden = false;
  $("main").hidden = true; $("strip").hidden = true; $("stale").hidden = true;
  $("problems").replaceChildren();
  setConnection("token");
  if (first) $("token-input").focus();
}

function tokenAccepted() {
  if ($("token-form").hidden) return;
  $("token-form").hidden = true;
  $("main").hidden = false; $("strip").hidden = false;
}

$("token-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const box = $("token-input");
  setToken(box.value);
  box.value = "";
  scheduleRefresh(0);
});
window.addEventListener("hashchange", () => { if (takeTokenFromAddress()) scheduleRefresh(0); });

function markReachable() {
  unreachableSince = null;
  for (const id of ["main", "strip", "summary"]) $(id).classList.remove("stale");
  $("stale").hidden = true;
}

function markUnreachable() {
  if (unreachableSince === null) unreachableSince = Date.now() / 1000;
  for (const id of ["main", "strip", "summary"]) $(id).classList.add("stale");
  const box = $("stale");
  const when = new Date(unreachableSince * 1000).toLocaleTimeString();
  const what = lastState ? "the cards below show what it said last, greyed out" : "nothing to show yet";
  patchChildren(box, [el("strong", "", "The daemon does not answer"),
    document.createTextNode(` since ${when} (`), timeEl(unreachableSince),
    document.createTextNode(`): ${what}. Retrying…`)]);
  box.hidden = false;
}

// An error as a sentence for the operator: the browser's own words ("Failed to fetch") never.
function explain(err) {
  if (err instanceof Unreachable || err instanceof TypeError) return "the daemon does not answer";
  return err.message;
}

// -- actions ---------------------------------------------------------------------------------

async function act(path, body) {
  try {
    const answer = await post(path, body);
    if (answer.state) render(answer.state);
    else scheduleRefresh(0);
  } catch (err) {
    if (err instanceof NeedsToken) { askForToken(hasToken()); return; }
    if (err instanceof Unreachable) markUnreachable();
    $("problems").replaceChildren();
    problem(`That did not work: ${explain(err)}.`);
  }
}

// Purge cannot be undone: the first press asks, the second purges; "Keep" takes it back.
function purgeActions(key, label, doPurge) {
  if (!confirming.has(key)) {
    return [button(label, "purge danger", () => { confirming.add(key); rerender(key, "keep"); }, {}, "purge")];
  }
  return [
    button("Purge for good", "purge-confirm danger", async () => { confirming.delete(key); await doPurge(); }, {}, "purge-confirm"),
    button("Keep", "purge-keep secondary", () => { confirming.delete(key); rerender(key, "purge"); }, {}, "keep"),
  ];
}

function rerender(rowKey, focusKey) {
  if (lastState) render(lastState, false);
  const row = document.querySelector(`#sec-dlq [data-key="${CSS.escape(rowKey)}"]`);
  row?.querySelector(`button[data-key="${focusKey}"]`)?.focus();
}

// -- sections --------------------------------------------------------------------------------

function renderSummary(s) {
  const parts = [`v${s.version}`, `up ${ago(s.started_at || (Date.now() / 1000 - s.uptime_s)).replace(" ago", "")}`,
    `model: ${s.provider || "none configured"}`];
  if (s.sandbox) parts.push(`sandbox: ${s.sandbox.mode}`);
  const b = s.backend;
  if (b && b.kind === "redis") {
    const held = b.partitions ? ` · partitions ${b.partitions.held.length}/${b.partitions.total}` : "";
    parts.push(`backend: redis${b.connected ? "" : " (unreachable)"}, node ${b.node_id}${held}`);
  }
  $("summary").textContent = parts.join(" · ");
  const lines = [];
  for (const p of (s.problems || [])) if (p.startsWith("Redis unreachable")) lines.push(p);
  for (const c of s.channels) if (c.status === "failing") lines.push(`${c.name} is failing: ${c.last_error}`);
  if (s.sandbox && s.sandbox.mode !== "bubblewrap")
    lines.push(`No OS sandbox: every exec / python_repl call asks for approval (${s.sandbox.detail}).`);
  for (const p of (s.providers || [])) if (!p.healthy) lines.push(`Model provider ${p.name} failed last time: ${p.last_error}`);
  lines.push(...mcpProblems(s.mcp || {}));
  patchChildren($("problems"), lines.map(text => el("div", "", text)));
}

// mcp.json that could not be used, and MCP servers down (crashed, or failing to start and
// waiting for their next try), as `soulflow status` and doctor say them
function mcpProblems(mcp) {
  const lines = [];
  if (mcp.error) lines.push(`${mcp.config || "mcp.json"} not used: ${mcp.error}`);
  for (const m of (mcp.servers || [])) {
    if (m.status === "running" || !m.failures) continue;
    const next = m.retry_at ? `; next start ${ago(m.retry_at)}` : "";
    lines.push(`MCP server ${m.name} is down (${m.failures} failed start(s) in a row${next}): ${m.last_error || "no error text"}`);
  }
  return lines;
}

function renderApprovals(s) {
  fill($("approvals"), (s.approvals || []).map(a => {
    const target = a.kind === "task" ? { task_id: a.task_id } : { run_id: a.run_id, approval_id: a.approval_id };
    const decide = decision => () => act("/api/approvals/decide", { ...target, decision });
    return item({
      key: a.approval_id || a.task_id || a.run_id,
      cls: "approval",
      title: `${a.tool} — ${a.reason}`,
      sub: [`asked by ${a.requester} in ${a.provider}:${a.chat_id}, ${ago(a.since)}${a.deferred ? " (deferred)" : ""}`],
      code: a.arguments || null,
      actions: [
        button("Approve", "approve", decide("approve"), { id: a.task_id || a.run_id }, "approve"),
        button("Deny", "deny danger", decide("deny"), { id: a.task_id || a.run_id }, "deny"),
      ],
    });
  }), "Nothing waits for a decision. Risky tool calls and task steps show up here for you to approve or deny.");
}

function renderChannels(s) {
  const pills = { connected: "ok", connecting: "wait", failing: "bad", stopped: "off", standby: "off" };
  fill($("channels"), s.channels.map(c => {
    const title = el("div", "title");
    title.append(el("span", "", c.name + " "), el("span", "pill " + (pills[c.status] || "off"), c.status));
    const t = (s.traffic && s.traffic.channels && s.traffic.channels[c.name]) || { in: [], out: [] };
    const sum = xs => xs.reduce((a, b) => a + b, 0);
    return item({ key: c.name, title, sub: [
      `last read ${ago(c.last_read_at)} · last send ${ago(c.last_send_at)} · ${sum(t.in)} in / ${sum(t.out)} out this hour`,
      c.role === "leader" ? `this node reads the account (lease token ${c.lease_token}), taken ${ago(c.role_since)}` : "",
      c.role === "standby" ? `standby (another node reads the account; this one sends), ${ago(c.role_since)}` : "",
      c.consecutive_failures ? `${c.consecutive_failures} failed reads in a row` : "",
      c.send_failures ? `${c.send_failures} failed sends in a row` : "",
      c.restarts ? `restarted ${c.restarts}×` : "",
      c.last_error ? `last error ${ago(c.last_error_at)}: ${c.last_error}` : "",
    ] });
  }), "No channel is configured.");
}

function renderRuns(s) {
  fill($("runs"), (s.runs || []).map(r => item({
    key: r.run_id,
    title: `${r.sub_agent ? "Sub-agent run" : "Run"} ${r.run_id} — ${r.step}`,
    sub: [`for ${r.requester || "a scheduled job"} in ${r.provider}:${r.chat_id} · started ${ago(r.started_at)} · turn ${r.turns}/${r.max_turns}`],
    actions: [button("Cancel", "cancel-run secondary", () => act("/api/runs/cancel", { run_id: r.run_id }), { run: r.run_id })],
  })), "No agent run is active. Write in the local chat to start one.");
  const tasks = (s.task_list || []).filter(t => !t.finished);
  fill($("tasks"), tasks.map(t => item({
    key: t.task_id,
    title: `Task ${t.title || t.task_id} — ${t.status}`,
    sub: [t.current.length ? `now: ${t.current.join(", ")}` : "", ...t.waiting.map(w => `waiting: ${w}`),
      `${Object.entries(t.counts).map(([k, v]) => `${v} ${k}`).join(", ")} · updated ${ago(t.updated_at)}`],
    actions: [button("Cancel", "cancel-task secondary", () => act("/api/tasks/cancel", { task_id: t.task_id }), { task: t.task_id })],
  })), "No task graph is running.");
}

function renderCron(s) {
  fill($("cron"), (s.cron_jobs || []).map(j => {
    const next = isoToEpoch(j.next_run_at);
    return item({
      key: j.id,
      cls: "cron-job" + (j.enabled ? "" : " paused"),
      title: `${j.name || j.id} — ${j.schedule}${j.enabled ? "" : " (paused)"}`,
      sub: [`to ${j.chat.provider}:${j.chat.chat_id} · ${j.enabled && next ? "next " + ago(next) : "not scheduled"} · ran ${j.runs}×${j.last_run_at ? ", last " + ago(isoToEpoch(j.last_run_at)) + " (" + j.last_status + ")" : ""}`],
      code: j.text,
      actions: [
        button("Run now", "cron-run secondary", () => act("/api/cron/run", { id: j.id }), { job: j.id }),
        j.enabled ? button("Pause", "cron-pause secondary", () => act("/api/cron/disable", { id: j.id }), { job: j.id })
                  : button("Resume", "cron-resume", () => act("/api/cron/enable", { id: j.id }), { job: j.id }),
      ],
    });
  }), "No scheduled job. Ask the agent (\"remind me every morning…\") or use `soulflow cron add`.");
}

function renderDlq(s) {
  const dlq = s.dlq || { outbound: [], inbound: [] };
  const present = new Set([...dlq.outbound.map(e => e.message_id), ...(dlq.inbound.length ? ["inbound-all"] : [])]);
  for (const key of confirming) if (!present.has(key)) confirming.delete(key);  // replayed meanwhile
  fill($("dlq-out"), dlq.outbound.map(e => item({
    key: e.message_id,
    cls: "dead-letter",
    title: `To ${e.provider}:${e.chat_id}, ${ago(e.at)}${e.retry_count ? ` after ${e.retry_count} tries` : ""}`,
    sub: [`error: ${e.error}`], code: e.content,
    actions: [
      button("Replay", "replay", () => act("/api/dlq/replay", { ids: [e.message_id] }), { id: e.message_id }),
      ...purgeActions(e.message_id, "Purge", () => act("/api/dlq/purge", { ids: [e.message_id] })),
    ],
  })), "No undelivered message. Replies that fail for good land here, to replay once the cause is fixed.");
  const inbound = dlq.inbound.map(e => item({
    key: `${e.provider}:${e.chat_id}:${e.at}`,
    title: `From ${e.provider}:${e.chat_id}, ${ago(e.at)} (${e.stage})`, sub: [`error: ${e.error}`], code: e.content,
  }));
  if (inbound.length)  // kept for reading only: nothing to replay, so purge them all at once
    inbound.push(item({ key: "inbound-all", title: "", cls: "purge-all",
      actions: purgeActions("inbound-all", "Purge all quarantined", () => act("/api/dlq/purge", { inbound: true })) }));
  fill($("dlq-in"), inbound, "No quarantined message.");
}

const secs = s => s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;

function renderProviders(s) {
  fill($("providers"), (s.providers || []).map(p => {
    const lat = p.latency || {};
    const title = el("div", "title");
    title.append(el("span", "", p.name + (p.default ? " (default) " : " ")),
      el("span", "pill " + (p.healthy ? "ok" : "bad"), p.healthy ? "healthy" : "failing"));
    return item({ key: p.name, title, sub: [
      `${p.calls} calls · ${p.error_count} errors${p.in_flight ? " · " + p.in_flight + " in flight" : ""}`,
      lat.samples ? `latency of the last ${lat.samples} calls: median ${secs(lat.p50_s)}, p95 ${secs(lat.p95_s)}, last ${secs(lat.last_s)}` : "no call yet",
      p.last_error ? `last error ${ago(p.last_error_at)}: ${p.last_error}` : "",
    ] });
  }), "No model provider is configured: set PROVIDER in the workspace's .env (docs/config.md).");
}

function renderQueues(s) {
  const stats = Object.entries(s.queues).map(([k, v]) => {
    const box = el("div", "stat");
    box.dataset.key = k;
    box.append(el("div", "n" + ((k === "dlq" || k === "inbound_dlq") && v > 0 ? " bad" : ""), v), el("div", "k", k.replace(/_/g, " ")));
    return box;
  });
  patchChildren($("queues"), stats);
}

function renderDecisions(s) {
  fill($("decisions"), (s.decisions || []).map(d => item({ key: d.key, title: `${d.key}: ${d.value}`, sub: [`priority ${d.priority}${d.source ? " · from " + d.source : ""} · ${ago(d.updated_at)}`] })),
    "No decision recorded. The agent records lasting choices here (\"always answer in Korean\").");
  fill($("workflow"), (s.workflow_events || []).slice().reverse().map(e => {
    const [icon, text] = describe(e);
    return item({ title: `${icon} ${text}`, sub: [ago(e.at)] });
  }), "No workflow event yet: task graphs report their steps here.");
}

let lastTraffic = null;
window.addEventListener("resize", () => { if (lastTraffic) drawChart($("chart"), lastTraffic); });

// `fresh`: `s` was just read from the daemon (not a redraw of the last state after a local
// change, such as a Purge waiting for its second press)
function render(s, fresh = true) {
  lastState = s;
  lastTraffic = s.traffic;
  if (fresh) { tokenAccepted(); markReachable(); }
  const rows = attention(s);
  renderStrip($("strip"), rows);
  renderSummary(s); renderApprovals(s); renderChannels(s); renderRuns(s); renderCron(s);
  renderDlq(s); renderProviders(s); renderQueues(s); renderDecisions(s);
  renderUsage($("usage"), s);
  drawChart($("chart"), s.traffic);
  orderSections(rows, HOME);
  $("main").dataset.renders = String(Number($("main").dataset.renders || 0) + 1);
}

async function refresh() {
  try { render(await api("/api/state")); }
  catch (err) {
    if (err instanceof NeedsToken) { askForToken(hasToken()); return; }
    if (err instanceof Unreachable) { markUnreachable(); return; }
    $("problems").replaceChildren(); problem(`Cannot read the daemon's state: ${explain(err)}.`);
  }
}

function scheduleRefresh(ms = 500) {  // at most two state reads a second, however busy
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, ms);
}

// -- live events and chat --------------------------------------------------------------------

function addEvent(ev) {
  if (ev.kind === "local.message") { if (ev.data.chat_id === CHAT_ID) addChat(ev.data, true); return; }
  const [icon, text, bad] = describe(ev);
  const li = el("li", bad ? "bad" : "");
  li.dataset.kind = ev.kind;
  li.append(el("span", "icon", icon), el("span", "text", text), timeEl(ev.at));
  const list = $("events");
  list.prepend(li);
  while (list.childElementCount > 200) list.lastChild.remove();
}

// The chat log shows a transcript entry per bubble, except edits (a streamed reply growing,
// channels/local/edits.py): an edit replaces the text of the bubble of the reply it names, in
// place, so a reply streams in one bubble. An edit of a reply not on the page (older than the
// bubbles kept) gets a bubble of its own, which its later edits then update. The daemon folds
// the edits of a page it sends (`last_seq` is then the cursor), so a reload shows each reply
// once with its latest text. The long poll is the record; the live event only gets a new
// entry here sooner, and only the very next one (a gap is the poll's to fill).
const CHAT_KEEP = 500;          // bubbles kept on the page, oldest leave first
const replyText = new Map();    // reply id -> the text node of its bubble (assistant only)

function nearBottom(log) { return log.scrollHeight - log.scrollTop - log.clientHeight < 24; }

function addChat(entry, live = false) {
  if (entry.seq <= chatAfter || (live && entry.seq !== chatAfter + 1)) return;
  chatAfter = entry.seq;
  showChat(entry);
}

function showChat(entry) {
  const log = $("chat-log");
  const reply = entry.role === "assistant";
  // reading older messages, the view stays where it is; what the operator just sent, it shows
  const follow = !reply || nearBottom(log);
  const target = reply && typeof entry.edits === "string" ? entry.edits : null;
  const shown = target !== null ? replyText.get(target) : undefined;
  const content = String(entry.content ?? "");
  if (shown) {
    if (shown.textContent !== content) shown.textContent = content;
  } else {
    log.querySelector(".empty")?.remove();
    const row = el("div", "msg " + (reply ? "assistant" : "user"));
    const text = el("span", "", content);
    row.append(text);
    if (reply) {
      row.dataset.key = target ?? String(entry.id);
      replyText.set(row.dataset.key, text);
    }
    log.append(row);
    while (log.childElementCount > CHAT_KEEP) {
      const gone = log.firstElementChild;
      if (gone.dataset.key && replyText.get(gone.dataset.key) === gone.firstElementChild)
        replyText.delete(gone.dataset.key);
      gone.remove();
    }
  }
  if (follow) log.scrollTop = log.scrollHeight;
}

function takeChatPage(body) {
  body.messages.forEach(entry => addChat(entry));
  if (Number.isInteger(body.last_seq)) chatAfter = Math.max(chatAfter, body.last_seq);
}

async function pollChat() {
  for (;;) {
    try {
      takeChatPage(await api(`/api/chat/${CHAT_ID}/messages?after=${chatAfter}&wait=25`));
    } catch (err) {
      if (err instanceof NeedsToken) await tokenChanged();
      else await new Promise(r => setTimeout(r, 2000));
    }
  }
}

function setConnection(status) {
  const pill = $("conn");
  pill.className = "pill " + (status === "live" ? "ok" : status === "token" ? "bad" : "wait");
  pill.textContent = status === "live" ? "live" : status === "token" ? "token needed" : "reconnecting…";
}

$("chat-form").addEventListener("submit", async ev => {
  ev.preventDefault();
  const box = $("chat-text"); const text = box.value;
  if (!text.trim()) return;
  box.value = "";
  try { await post("/api/chat", { chat_id: CHAT_ID, text }); }
  catch (err) {
    if (err instanceof NeedsToken) askForToken(hasToken());
    else problem(`The message was not sent: ${explain(err)}.`);
    box.value = text;
  }
});
$("chat-text").addEventListener("keydown", ev => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
});

takeTokenFromAddress();
followEvents({
  status: status => {
    setConnection(status);
    if (status === "reconnecting") scheduleRefresh(0);  // is it gone? say so on the cards
    if (status === "token") askForToken(hasToken());
  },
  hello: () => scheduleRefresh(0),  // (re)connected: the state may have changed meanwhile
  event: ev => { addEvent(ev); scheduleRefresh(); },
});
$("chat-log").append(el("div", "empty", "Nothing said here yet. Write below: the agent answers as it would on any channel."));
refresh();
setInterval(() => { refreshTimes(); scheduleRefresh(0); }, 5000);
api(`/api/chat/${CHAT_ID}/messages?after=-1`).then(takeChatPage).catch(() => {}).finally(pollChat);
