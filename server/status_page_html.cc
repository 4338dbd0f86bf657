// The markup and script of GET /status (server/status_page.h). Self-contained: no external
// script, style sheet, font or image; it reads only /status.json of the same origin.
#include "server/status_page.h"

namespace unloadkv::server {
namespace {

constexpr char kPage[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>unloadkv status</title>
<style>
  body { font-family: sans-serif; margin: 16px; color: #222; background: #fafafa; }
  h1 { font-size: 20px; margin: 0 0 4px 0; }
  #summary { color: #555; margin-bottom: 12px; font-size: 14px; }
  #charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 12px; }
  .chart { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: 8px; }
  .chart h2 { font-size: 14px; margin: 0 0 4px 0; }
  .legend { font-size: 12px; color: #444; }
  .legend span { margin-right: 12px; }
  canvas { width: 100%; height: 180px; display: block; }
  table { border-collapse: collapse; font-size: 13px; background: #fff; margin-top: 12px; }
  th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; }
  #error { color: #b00; font-weight: bold; }
</style>
</head>
<body data-points="0" data-charts="0">
<h1>unloadkv <span id="node"></span></h1>
<div id="summary">waiting for /status.json ...</div>
<div id="durability"></div>
<div id="error"></div>
<div id="charts"></div>
<div id="cluster"></div>
<script>
"use strict";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"];
const CHARTS = [
  { id: "rps", title: "Requests per second", unit: "req/s",
    series: [["all", "rps"], ["PUT", "put_rps"], ["GET", "get_rps"]] },
  { id: "lat", title: "Latency, server side (microseconds)", unit: "us",
    series: [["PUT p50", "put_p50_us"], ["PUT p99", "put_p99_us"],
             ["GET p50", "get_p50_us"], ["GET p99", "get_p99_us"]] },
  { id: "path", title: "Value writes per second by path", unit: "writes/s",
    series: [["offload", "offload_wps"], ["unload", "unload_wps"]],
    note: s => "unloaded share " + (s.unloaded_share == null ? "-" :
                                    (100 * s.unloaded_share).toFixed(1) + "%") },
  { id: "ring", title: "Staging ring slots (writes this node unloads)", unit: "slots",
    series: [["in use", "ring_in_use"], ["slots", "ring_slots"]] },
];

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function setup() {
  const box = document.getElementById("charts");
  for (const c of CHARTS) {
    const div = el("div", { class: "chart" });
    div.appendChild(el("h2", {}, c.title));
    const canvas = el("canvas", { id: "c-" + c.id, width: 900, height: 360 });
    div.appendChild(canvas);
    div.appendChild(el("div", { class: "legend", id: "l-" + c.id }));
    box.appendChild(div);
  }
}

function fmt(v) {
  if (v == null) return "-";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return a >= 10 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(2);
}

function bytes(v) {
  return v >= 1 << 30 ? (v / (1 << 30)).toFixed(2) + " GiB" :
         v >= 1 << 20 ? (v / (1 << 20)).toFixed(1) + " MiB" : (v / 1024).toFixed(0) + " KiB";
}

// Draws one chart; returns how many points it drew.
function draw(chart, samples) {
  const canvas = document.getElementById("c-" + chart.id);
  const g = canvas.getContext("2d");
  const W = canvas.width, H = canvas.height, L = 70, R = 10, T = 10, B = 30;
  g.clearRect(0, 0, W, H);
  let max = 0;
  for (const s of samples) for (const [, k] of chart.series) if (s[k] != null) max = Math.max(max, s[k]);
  max = max > 0 ? max * 1.1 : 1;
  g.strokeStyle = "#ccc"; g.fillStyle = "#555"; g.font = "20px sans-serif"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = T + (H - T - B) * i / 4;
    g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
    g.fillText(fmt(max * (1 - i / 4)), 4, y + 7);
  }
  g.fillText(samples.length + " s", W - R - 60, H - 6);
  const n = Math.max(samples.length - 1, 1);
  let drawn = 0;
  chart.series.forEach(([, key], j) => {
    g.strokeStyle = COLORS[j % COLORS.length]; g.lineWidth = 3;
    g.beginPath();
    let pen = false;
    samples.forEach((s, i) => {
      if (s[key] == null) { pen = false; return; }
      const x = L + (W - L - R) * i / n, y = T + (H - T - B) * (1 - s[key] / max);
      if (pen) g.lineTo(x, y); else g.moveTo(x, y);
      pen = true; drawn++;
    });
    g.stroke();
  });
  const last = samples.length ? samples[samples.length - 1] : {};
  const legend = document.getElementById("l-" + chart.id);
  legend.textContent = "";
  chart.series.forEach(([name, key], j) => {
    const span = el("span", {}, "\u25A0 " + name + " " + fmt(last[key]) + " " + chart.unit);
    span.style.color = COLORS[j % COLORS.length];
    legend.appendChild(span);
  });
  if (chart.note && samples.length) legend.appendChild(el("span", {}, chart.note(last)));
  return drawn;
}

function drawCluster(cluster) {
  const box = document.getElementById("cluster");
  box.textContent = "";
  if (!cluster) return;
  box.appendChild(el("h2", {}, "Shard map (cluster " + cluster.name + ", " + cluster.replicas +
                                " replicas wanted)"));
  const t = el("table");
  const head = el("tr");
  for (const h of ["shard", "state", "epoch", "primary", "backups", "joining", "this node"])
    head.appendChild(el("th", {}, h));
  t.appendChild(head);
  for (const s of cluster.shards) {
    const tr = el("tr");
    for (const v of [s.id, s.state, s.epoch, s.primary || "-", s.backups.join(", ") || "-",
                     s.joining.join(", ") || "-", s.role || "-"])
      tr.appendChild(el("td", {}, String(v)));
    t.appendChild(tr);
  }
  box.appendChild(t);
  box.appendChild(el("div", { class: "legend" }, "live nodes: " + cluster.nodes.join(", ")));
}

async function refresh() {
  try {
    const r = await fetch("status.json", { cache: "no-store" });
    if (!r.ok) throw new Error("status.json: HTTP " + r.status);
    const st = await r.json();
    document.getElementById("node").textContent = st.node ? "node " + st.node : "";
    const s = st.samples, last = s.length ? s[s.length - 1] : null;
    document.getElementById("summary").textContent = last ?
      fmt(last.rps) + " req/s, " + fmt(last.keys) + " keys, " + fmt(last.connections) +
      " connections, arena " + bytes(last.arena_used) + " used of " +
      bytes(last.arena_used + last.arena_free) + "; updated " +
      new Date(last.t).toLocaleTimeString() : "no sample yet (one a second)";
    let points = 0;
    for (const c of CHARTS) points += draw(c, s);
    drawCluster(st.cluster);
    const d = st.durability;
    document.getElementById("durability").textContent = !d ? "in memory only (no --data_dir)" :
      "log: fsync " + d.fsync + ", " + fmt(d.log_records) + " records, " + fmt(d.log_syncs) +
      " fsyncs" + (d.failure ? "; REFUSING WRITES: " + d.failure : "");
    document.body.dataset.points = String(points);
    document.body.dataset.charts = String(CHARTS.length);
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = String(e);
    document.body.dataset.error = String(e);
  }
}

setup();
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)HTML";

}  // namespace

const std::string& StatusPageHtml() {
  static const std::string* const page = new std::string(kPage);
  return *page;
}

}  // namespace unloadkv::server
