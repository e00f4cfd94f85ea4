// The operator's console: renders /api/state, follows /api/events, sends the actions.
"use strict";

import { api, post, followEvents } from "/static/api.js";
import { el, button, ago, isoToEpoch, timeEl, fill, item, refreshTimes } from "/static/render.js";
import { describe } from "/static/events.js";
import { drawChart } from "/static/chart.js";
import { renderUsage } from "/static/usage.js";

const CHAT_ID = "dashboard";
const $ = id => document.getElementById(id);
let chatAfter = -1;
let refreshTimer = null;

function problem(text) { $("problems").append(el("div", "", text)); }

// -- actions ---------------------------------------------------------------------------------

async function act(path, body) {
  try {
    const answer = await post(path, body);
    if (answer.state) render(answer.state);
    else scheduleRefresh(0);
  } catch (err) {
    $("problems").replaceChildren();
    problem(`That did not work: ${err.message}`);
  }
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
  $("problems").replaceChildren();
  for (const p of (s.problems || [])) if (p.startsWith("Redis unreachable")) problem(p);
  for (const c of s.channels) if (c.status === "failing") problem(`${c.name} is failing: ${c.last_error}`);
  if (s.sandbox && s.sandbox.mode !== "bubblewrap")
    problem(`No OS sandbox: every exec / python_repl call asks for approval (${s.sandbox.detail}).`);
  for (const p of (s.providers || [])) if (!p.healthy) problem(`Model provider ${p.name} failed last time: ${p.last_error}`);
}

function renderApprovals(s) {
  fill($("approvals"), (s.approvals || []).map(a => {
    const target = a.kind === "task" ? { task_id: a.task_id } : { run_id: a.run_id, approval_id: a.approval_id };
    const decide = decision => () => act("/api/approvals/decide", { ...target, decision });
    return item({
      cls: "approval",
      title: `${a.tool} — ${a.reason}`,
      sub: [`asked by ${a.requester} in ${a.provider}:${a.chat_id}, ${ago(a.since)}${a.deferred ? " (deferred)" : ""}`],
      code: a.arguments || null,
      actions: [
        button("Approve", "approve", decide("approve"), { id: a.task_id || a.run_id }),
        button("Deny", "deny danger", decide("deny"), { id: a.task_id || a.run_id }),
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
    return item({ title, sub: [
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
    title: `${r.sub_agent ? "Sub-agent run" : "Run"} ${r.run_id} — ${r.step}`,
    sub: [`for ${r.requester || "a scheduled job"} in ${r.provider}:${r.chat_id} · started ${ago(r.started_at)} · turn ${r.turns}/${r.max_turns}`],
    actions: [button("Cancel", "cancel-run secondary", () => act("/api/runs/cancel", { run_id: r.run_id }), { run: r.run_id })],
  })), "No agent run is active. Write in the local chat to start one.");
  const tasks = (s.task_list || []).filter(t => !t.finished);
  fill($("tasks"), tasks.map(t => item({
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
  fill($("dlq-out"), dlq.outbound.map(e => item({
    cls: "dead-letter",
    title: `To ${e.provider}:${e.chat_id}, ${ago(e.at)}${e.retry_count ? ` after ${e.retry_count} tries` : ""}`,
    sub: [`error: ${e.error}`], code: e.content,
    actions: [
      button("Replay", "replay", () => act("/api/dlq/replay", { ids: [e.message_id] }), { id: e.message_id }),
      button("Purge", "purge danger", () => act("/api/dlq/purge", { ids: [e.message_id] }), { id: e.message_id }),
    ],
  })), "No undelivered message. Replies that fail for good land here, to replay once the cause is fixed.");
  fill($("dlq-in"), dlq.inbound.map(e => item({
    title: `From ${e.provider}:${e.chat_id}, ${ago(e.at)} (${e.stage})`, sub: [`error: ${e.error}`], code: e.content,
  })), "No quarantined message.");
  if (dlq.inbound.length) {  // kept for reading only: nothing to replay, so purge them all at once
    $("dlq-in").append(item({ title: "", actions: [button("Purge all quarantined", "purge-inbound danger", () => act("/api/dlq/purge", { inbound: true }))] }));
  }
}

const secs = s => s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;

function renderProviders(s) {
  fill($("providers"), (s.providers || []).map(p => {
    const lat = p.latency || {};
    const title = el("div", "title");
    title.append(el("span", "", p.name + (p.default ? " (default) " : " ")),
      el("span", "pill " + (p.healthy ? "ok" : "bad"), p.healthy ? "healthy" : "failing"));
    return item({ title, sub: [
      `${p.calls} calls · ${p.error_count} errors${p.in_flight ? " · " + p.in_flight + " in flight" : ""}`,
      lat.samples ? `latency of the last ${lat.samples} calls: median ${secs(lat.p50_s)}, p95 ${secs(lat.p95_s)}, last ${secs(lat.last_s)}` : "no call yet",
      p.last_error ? `last error ${ago(p.last_error_at)}: ${p.last_error}` : "",
    ] });
  }), "No model provider is configured: set PROVIDER in the workspace's .env (docs/config.md).");
}

function renderQueues(s) {
  const stats = Object.entries(s.queues).map(([k, v]) => {
    const box = el("div", "stat");
    box.append(el("div", "n" + ((k === "dlq" || k === "inbound_dlq") && v > 0 ? " bad" : ""), v), el("div", "k", k.replace(/_/g, " ")));
    return box;
  });
  $("queues").replaceChildren(...stats);
}

function renderDecisions(s) {
  fill($("decisions"), (s.decisions || []).map(d => item({ title: `${d.key}: ${d.value}`, sub: [`priority ${d.priority}${d.source ? " · from " + d.source : ""} · ${ago(d.updated_at)}`] })),
    "No decision recorded. The agent records lasting choices here (\"always answer in Korean\").");
  fill($("workflow"), (s.workflow_events || []).slice().reverse().map(e => {
    const [icon, text] = describe(e);
    return item({ title: `${icon} ${text}`, sub: [ago(e.at)] });
  }), "No workflow event yet: task graphs report their steps here.");
}

let lastTraffic = null;
window.addEventListener("resize", () => { if (lastTraffic) drawChart($("chart"), lastTraffic); });

function render(s) {
  lastTraffic = s.traffic;
  renderSummary(s); renderApprovals(s); renderChannels(s); renderRuns(s); renderCron(s);
  renderDlq(s); renderProviders(s); renderQueues(s); renderDecisions(s);
  renderUsage($("usage"), s);
  drawChart($("chart"), s.traffic);
}

async function refresh() {
  try { render(await api("/api/state")); }
  catch (err) { $("problems").replaceChildren(); problem(`Cannot read the daemon's state: ${err.message}`); }
}

function scheduleRefresh(ms = 500) {  // at most two state reads a second, however busy
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, ms);
}

// -- live events and chat --------------------------------------------------------------------

function addEvent(ev) {
  if (ev.kind === "local.message") { if (ev.data.chat_id === CHAT_ID) addChat(ev.data); return; }
  const [icon, text, bad] = describe(ev);
  const li = el("li", bad ? "bad" : "");
  li.dataset.kind = ev.kind;
  li.append(el("span", "icon", icon), el("span", "text", text), timeEl(ev.at));
  const list = $("events");
  list.prepend(li);
  while (list.childElementCount > 200) list.lastChild.remove();
}

function addChat(entry) {
  if (entry.seq <= chatAfter) return;
  const log = $("chat-log");
  log.querySelector(".empty")?.remove();
  const row = el("div", "msg " + entry.role);
  row.append(el("span", "", entry.content));
  log.append(row);
  log.scrollTop = log.scrollHeight;
  chatAfter = entry.seq;
}

async function pollChat() {
  for (;;) {
    try {
      const body = await api(`/api/chat/${CHAT_ID}/messages?after=${chatAfter}&wait=25`);
      body.messages.forEach(addChat);
    } catch (err) { await new Promise(r => setTimeout(r, 2000)); }
  }
}

function setConnection(status) {
  const pill = $("conn");
  pill.className = "pill " + (status === "live" ? "ok" : "wait");
  pill.textContent = status === "live" ? "live" : "reconnecting…";
}

$("chat-form").addEventListener("submit", async ev => {
  ev.preventDefault();
  const box = $("chat-text"); const text = box.value;
  if (!text.trim()) return;
  box.value = "";
  try { await post("/api/chat", { chat_id: CHAT_ID, text }); }
  catch (err) { problem(`The message was not sent: ${err.message}`); box.value = text; }
});
$("chat-text").addEventListener("keydown", ev => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("chat-form").requestSubmit(); }
});

followEvents({
  status: setConnection,
  hello: () => scheduleRefresh(0),  // (re)connected: the state may have changed meanwhile
  event: ev => { addEvent(ev); scheduleRefresh(); },
});
$("chat-log").append(el("div", "empty", "Nothing said here yet. Write below: the agent answers as it would on any channel."));
refresh();
setInterval(() => { refreshTimes(); scheduleRefresh(0); }, 5000);
api(`/api/chat/${CHAT_ID}/messages?after=-1`).then(b => b.messages.forEach(addChat)).catch(() => {}).finally(pollChat);
