// Messages per minute per channel over the last hour, as an inline SVG (no library): each
// channel's messages in (solid) and out (dashed) are two lines, named in the legend; hovering
// a minute shows its numbers (an SVG <title>, the browser's own tooltip). Colours come from
// classes (app.css), so the dark theme recolours the chart too.
"use strict";

import { patchChildren } from "/static/render.js";

const NS = "http://www.w3.org/2000/svg";
const PALETTE = 6;  // .series-0 … .series-5 in app.css

function svg(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function minuteLabel(minutesAgo) { return minutesAgo === 0 ? "this minute" : `${minutesAgo} min ago`; }

// traffic: {start, minutes, channels: {name: {in: [..], out: [..]}}}
export function drawChart(container, traffic) {
  const channels = (traffic && traffic.channels) || {};
  const names = Object.keys(channels);
  // drawn at the container's own width, so the labels keep their size on a phone
  const W = Math.max(280, Math.round(container.clientWidth || 600)), H = 150, L = 28, B = 18, T = 8;
  const minutes = (traffic && traffic.minutes) || 60;
  const highest = Math.max(0, ...names.flatMap(n => [...channels[n].in, ...channels[n].out]));
  const peak = Math.max(2, Math.ceil(highest / 2) * 2);  // even: the middle line is a whole number
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "messages per minute per channel, in and out, last hour" });
  const x = i => L + (W - L - 4) * (i / (minutes - 1));
  const y = v => T + (H - T - B) * (1 - v / peak);
  for (const v of [0, peak / 2, peak]) {
    root.append(svg("line", { class: "grid", x1: L, x2: W - 4, y1: y(v), y2: y(v) }));
    const label = svg("text", { class: "axis", x: L - 4, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = String(Math.round(v));
    root.append(label);
  }
  for (const [i, text] of [[0, "−60 min"], [30, "−30 min"], [minutes - 1, "now"]]) {
    const label = svg("text", { class: "axis", x: x(i), y: H - 4,
      "text-anchor": i === 0 ? "start" : i === minutes - 1 ? "end" : "middle" });
    label.textContent = text;
    root.append(label);
  }
  names.forEach((name, index) => {
    for (const way of ["in", "out"]) {
      const points = channels[name][way].map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      const line = svg("polyline", { points, class: `series series-${index % PALETTE} ${way}`, "data-key": `${name}:${way}` });
      const title = svg("title");
      title.textContent = `${name}, messages ${way}`;
      line.append(title);
      root.append(line);
    }
  });
  if (names.length) {  // one invisible column per minute, carrying its numbers as a tooltip
    const step = (W - L - 4) / (minutes - 1);
    for (let i = 0; i < minutes; i++) {
      const column = svg("rect", { class: "hover", x: Math.max(L, x(i) - step / 2), y: T, width: step, height: H - T - B });
      const title = svg("title");
      title.textContent = `${minuteLabel(minutes - 1 - i)}: ` +
        names.map(n => `${n} ${channels[n].in[i]} in, ${channels[n].out[i]} out`).join("; ");
      column.append(title);
      root.append(column);
    }
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((name, index) => {
    const sum = way => channels[name][way].reduce((a, b) => a + b, 0);
    for (const way of ["in", "out"]) {
      const span = document.createElement("span");
      span.dataset.key = `${name}:${way}`;
      const swatch = document.createElement("span");
      swatch.className = `swatch series-${index % PALETTE} ${way}`;
      span.append(swatch, document.createTextNode(`${name} ${way}: ${sum(way)} in the last hour`));
      legend.append(span);
    }
  });
  if (!names.length) {
    const note = document.createElement("div");
    note.className = "empty";
    note.textContent = "No channel has carried a message yet: send one in the local chat to see it here.";
    legend.append(note);
  }
  patchChildren(container, [root, legend]);  // a tooltip being read survives a refresh
}
