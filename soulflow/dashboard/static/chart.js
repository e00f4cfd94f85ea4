// Messages per minute per channel over the last hour, as an inline SVG (no library).
"use strict";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#4f46e5", "#059669", "#d97706", "#db2777", "#0891b2", "#7c3aed"];

function svg(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// traffic: {start, minutes, channels: {name: {in: [..], out: [..]}}}
export function drawChart(container, traffic) {
  const names = Object.keys((traffic && traffic.channels) || {});
  // drawn at the container's own width, so the labels keep their size on a phone
  const W = Math.max(280, Math.round(container.clientWidth || 600)), H = 150, L = 28, B = 18, T = 8;
  const minutes = (traffic && traffic.minutes) || 60;
  const totals = names.map(n => traffic.channels[n].in.map((v, i) => v + traffic.channels[n].out[i]));
  const highest = Math.max(0, ...totals.flat());
  const peak = Math.max(2, Math.ceil(highest / 2) * 2);  // even: the middle line is a whole number
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "messages per minute per channel, last hour" });
  const x = i => L + (W - L - 4) * (i / (minutes - 1));
  const y = v => T + (H - T - B) * (1 - v / peak);
  for (const v of [0, peak / 2, peak]) {
    root.append(svg("line", { x1: L, x2: W - 4, y1: y(v), y2: y(v), stroke: "#e5e7eb", "stroke-width": 1 }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end", "font-size": 10, fill: "#6b7280" });
    label.textContent = String(Math.round(v));
    root.append(label);
  }
  for (const [i, text] of [[0, "−60 min"], [30, "−30 min"], [minutes - 1, "now"]]) {
    const label = svg("text", { x: x(i), y: H - 4, "text-anchor": i === 0 ? "start" : i === minutes - 1 ? "end" : "middle", "font-size": 10, fill: "#6b7280" });
    label.textContent = text;
    root.append(label);
  }
  names.forEach((name, index) => {
    const points = totals[index].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    root.append(svg("polyline", { points, fill: "none", stroke: COLORS[index % COLORS.length], "stroke-width": 2, "stroke-linejoin": "round" }));
  });
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((name, index) => {
    const span = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = COLORS[index % COLORS.length];
    const sum = totals[index].reduce((a, b) => a + b, 0);
    span.append(swatch, document.createTextNode(`${name}: ${sum} in the last hour (in + out)`));
    legend.append(span);
  });
  if (!names.length) {
    const note = document.createElement("div");
    note.className = "empty";
    note.textContent = "No channel has carried a message yet: send one in the local chat to see it here.";
    legend.append(note);
  }
  container.replaceChildren(root, legend);
}
