// Talking to the daemon: JSON requests and the live event stream (SSE read over fetch, so the
// token can travel in a header, which EventSource cannot send).
//
// The token (when DASHBOARD_TOKEN is set) reaches the page as `/#token=...` (at load or added
// to the address later: `hashchange`) or through the token form; it is kept for this tab only
// (sessionStorage) and sent only as an `Authorization` header. The fragment is never sent to
// the server, it is wiped from the address (and so from history) at once, and the server
// answers with `Referrer-Policy: no-referrer`, so it is in no log and no Referer.
"use strict";

const STORE = "soulflow-token";
let token = sessionStorage.getItem(STORE) || "";
let tokenWaiters = [];

// The daemon did not answer at all (stopped, restarting, network): not an HTTP error.
export class Unreachable extends Error {}
// 401: no token, or not the right one.
export class NeedsToken extends Error {}

export function hasToken() { return token !== ""; }

export function setToken(value) {
  token = (value || "").trim();
  if (token) sessionStorage.setItem(STORE, token); else sessionStorage.removeItem(STORE);
  const waiters = tokenWaiters; tokenWaiters = [];
  waiters.forEach(wake => wake());
}

// Resolves when a token is given (form or address): a request refused with 401 waits here.
export function tokenChanged() { return new Promise(resolve => tokenWaiters.push(resolve)); }

// Take `#token=...` from the address, if there, and wipe it from the address bar.
export function takeTokenFromAddress() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given === null) return false;
  history.replaceState(null, "", location.pathname + location.search);
  setToken(given);
  return true;
}

function headers(extra = {}) {
  return token ? { Authorization: "Bearer " + token, ...extra } : { ...extra };
}

export async function api(path, options = {}) {
  let response;
  try {
    response = await fetch(path, { ...options, headers: headers(options.headers || {}), cache: "no-store" });
  } catch (err) {  // a TypeError with a browser's words ("Failed to fetch"): say what it means
    throw new Unreachable("the daemon does not answer (stopped, restarting, or the network is down)");
  }
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new NeedsToken(body.error || "a token is needed");
  if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
  return body;
}

export function post(path, body) {
  // X-SoulFlow-State: answer with the daemon's new state, so the page redraws at once
  return api(path, { method: "POST", headers: { "Content-Type": "application/json", "X-SoulFlow-State": "1" }, body: JSON.stringify(body) });
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// Follows /api/events for ever: reconnects after a drop (daemon restart included) and asks
// for what it missed with Last-Event-ID. `handlers.status(text)` says live / reconnecting /
// token (refused: waits for a token before trying again), `handlers.hello(info)` is called on
// each (re)connection, `handlers.event(ev)` per event.
export async function followEvents(handlers) {
  let lastId = "";
  let delay = 500;
  for (;;) {
    let refused = false;
    try {
      const extra = lastId ? { "Last-Event-ID": lastId } : {};
      const response = await fetch("/api/events", { headers: headers(extra), cache: "no-store" });
      if (response.status === 401) refused = true;
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
    if (refused) {
      handlers.status("token");
      await tokenChanged();
      delay = 500;
      continue;
    }
    handlers.status("reconnecting");
    await sleep(delay);
    delay = Math.min(delay * 2, 4000);
  }
}
