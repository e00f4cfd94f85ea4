// Talking to the daemon: JSON requests and the live event stream (SSE read over fetch, so the
// token can travel in a header, which EventSource cannot send).
"use strict";

// The token (when DASHBOARD_TOKEN is set) is given once as /#token=..., kept for this tab only.
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (hashToken) { sessionStorage.setItem("soulflow-token", hashToken); history.replaceState(null, "", "/"); }
const token = sessionStorage.getItem("soulflow-token") || "";
const authHeaders = token ? { Authorization: "Bearer " + token } : {};

export async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { ...authHeaders, ...(options.headers || {}) } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
  return body;
}

export function post(path, body) {
  // X-SoulFlow-State: answer with the daemon's new state, so the page redraws at once
  return api(path, { method: "POST", headers: { "Content-Type": "application/json", "X-SoulFlow-State": "1" }, body: JSON.stringify(body) });
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// Follows /api/events for ever: reconnects after a drop (daemon restart included) and asks
// for what it missed with Last-Event-ID. `handlers.status(text)` says live / reconnecting,
// `handlers.hello(info)` is called on each (re)connection, `handlers.event(ev)` per event.
export async function followEvents(handlers) {
  let lastId = "";
  let delay = 500;
  for (;;) {
    try {
      const headers = { ...authHeaders };
      if (lastId) headers["Last-Event-ID"] = lastId;
      const response = await fetch("/api/events", { headers, cache: "no-store" });
      if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          let id = "", kind = "message", data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("id: ")) id = line.slice(4);
            else if (line.startsWith("event: ")) kind = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (!data) continue;
          const parsed = JSON.parse(data);
          if (kind === "hello") { delay = 500; handlers.status("live"); handlers.hello(parsed); continue; }
          if (id) lastId = id;
          handlers.event(parsed);
        }
      }
    } catch (err) {
      // a dropped connection (TypeError: network error) is what a restart looks like
    }
    handlers.status("reconnecting");
    await sleep(delay);
    delay = Math.min(delay * 2, 4000);
  }
}
