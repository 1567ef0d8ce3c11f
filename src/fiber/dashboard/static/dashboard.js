// fiber dashboard: polls /api/snapshot once a second and redraws. Plain JavaScript, no
// library: the page works on a cluster with no internet. The token travels in a cookie
// the first visit set (HttpOnly), so the requests below need nothing else.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) {
    node.append(c instanceof Node ? c : (c === null || c === undefined ? "" : String(c)));
  }
  return node;
}

function seconds(s) {
  if (s === null || s === undefined) return "";
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60), h = Math.floor(m / 60);
  return h ? `${h}:${String(m % 60).padStart(2, "0")}:${String(Math.floor(s % 60)).padStart(2, "0")}`
           : `${m}:${String(Math.floor(s % 60)).padStart(2, "0")}`;
}

function row(cells, attrs, cell = "td") {
  const tr = el("tr", attrs);
  for (const c of cells) tr.append(el(cell, {}, c));
  return tr;
}

// The task stream: the last 60 s, one row per worker, one bar per batch of results
// (green: done, red: some task failed, orange: given back by a lost worker).
const SVG = "http://www.w3.org/2000/svg";
const WINDOW_S = 60, WIDTH = 1000;

function stream(p) {
  const workers = [...new Set(p.workers.map(w => w.name).concat(p.stream.map(b => b[0])))];
  workers.sort((a, b) => (a.length - b.length) || a.localeCompare(b));
  const rowOf = new Map(workers.map((w, i) => [w, i]));
  const rowHeight = Math.max(2, Math.min(10, Math.floor(400 / Math.max(1, workers.length))));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "stream");
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${workers.length * rowHeight}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("height", String(Math.max(12, workers.length * rowHeight)));
  // the span shown: the bars' own (10 s at least, 60 at most), so that a young pool's
  // bars are not a sliver at the right edge
  const span = Math.min(WINDOW_S, Math.max(10, ...p.stream.map(b => b[1] / 1000)));
  for (const [worker, startMs, endMs, outcome, tasks] of p.stream) {
    const startAge = startMs / 1000, endAge = endMs / 1000;
    const x = WIDTH * (1 - Math.min(startAge, span) / span);
    const w = Math.max(1, WIDTH * (Math.min(startAge, span) - endAge) / span - 2);
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("class", "bar " + outcome);
    rect.setAttribute("x", x.toFixed(1));
    rect.setAttribute("y", String(rowOf.get(worker) * rowHeight));
    rect.setAttribute("width", w.toFixed(1));
    rect.setAttribute("height", String(Math.max(1, rowHeight - 1)));
    rect.setAttribute("data-worker", worker);
    const title = document.createElementNS(SVG, "title");
    title.textContent = `${worker}: ${tasks} task(s) ${outcome}, ${(startAge - endAge).toFixed(3)} s`;
    rect.append(title);
    svg.append(rect);
  }
  const box = el("div", {class: "stream-box"});
  box.append(el("div", {class: "muted"},
    `task stream, last ${Math.round(span)} s (a row per worker; green done, red failed, orange given back)`), svg);
  return box;
}

// The bound of the histogram's first bucket that holds the q-th share of its count.
function quantile(h, q) {
  for (const [bound, count] of h.buckets) {
    if (count >= q * h.count) return bound === "+Inf" ? "more" : seconds(bound).replace(".0 s", " s");
  }
  return "";
}

// The program's live jobs by the state their cluster gives (asked every few seconds).
function drawCluster(cluster) {
  const body = document.querySelector("#cluster tbody");
  if (!cluster) { body.replaceChildren(); return; }
  document.getElementById("cluster-age").textContent = `(asked ${cluster.age_s} s ago)`;
  const rows = Object.entries(cluster.jobs || {}).map(([backend, states]) => {
    const other = Object.entries(states).filter(([s]) => s !== "pending" && s !== "running")
      .map(([s, n]) => `${s} ${n}`).join(", ");
    return row([backend, states.pending || 0, states.running || 0, other], {"data-backend": backend});
  });
  for (const [backend, error] of Object.entries(cluster.errors || {})) {
    rows.push(row([backend, "", "", `cannot ask: ${error}`], {"data-backend": backend}));
  }
  body.replaceChildren(...rows);
}

// Rows kept from one update to the next, by key: at 1,024 workers, rebuilding every row
// each second cost the browser more than the update's whole budget. A row's cells are
// written only where their text changed. ``cells`` gives strings, or [text, class] for a
// cell whose text sits in a span of that class (a worker's state).
function keyedRows(tbody, items, key, cells, attrs, onClick) {
  const kept = tbody.fiberRows || (tbody.fiberRows = new Map());
  const rows = [];
  const seen = new Set();
  for (const item of items) {
    const k = key(item);
    seen.add(k);
    const values = cells(item);
    let tr = kept.get(k);
    if (!tr) {
      tr = el("tr", attrs(item));
      for (const v of values) tr.append(el("td", {}, Array.isArray(v) ? el("span", {class: v[1]}, v[0]) : v));
      if (onClick) tr.addEventListener("click", () => onClick(item));
      kept.set(k, tr);
    } else {
      for (const [name, value] of Object.entries(attrs(item))) {
        if (tr.getAttribute(name) !== value) tr.setAttribute(name, value);
      }
      values.forEach((v, i) => {
        const td = tr.children[i];
        const target = Array.isArray(v) ? td.firstChild : td;
        const text = String(Array.isArray(v) ? v[0] : v);
        if (target.textContent !== text) target.textContent = text;
        if (Array.isArray(v) && target.className !== v[1]) target.className = v[1];
      });
    }
    rows.push(tr);
  }
  for (const k of [...kept.keys()]) if (!seen.has(k)) kept.delete(k);
  const current = tbody.children;
  if (current.length !== rows.length || rows.some((tr, i) => current[i] !== tr)) {
    tbody.replaceChildren(...rows);
  }
}

const poolViews = new Map();  // pool name -> {section, tbody}

// The worker tables show PAGE rows from workersFrom (the same page of every pool): the
// program builds only those rows, so that a poll of a 1,024-worker pool costs it a page,
// not the whole table. Every worker is still counted (by state, above the table).
const PAGE = 100;
let workersFrom = 0;

function pager(p) {
  const total = p.workers_total === undefined ? p.workers.length : p.workers_total;
  const first = p.workers_from || 0;
  const states = Object.entries(p.worker_states || {}).sort()
    .map(([s, n]) => `${s} ${n}`).join(" · ");
  const box = el("div", {class: "pager"});
  const turn = (to) => { workersFrom = Math.max(0, to); refreshNow(); };
  const back = el("button", {type: "button", class: "prev"}, "‹");
  const next = el("button", {type: "button", class: "next"}, "›");
  back.disabled = first <= 0;
  next.disabled = first + p.workers.length >= total;
  back.addEventListener("click", () => turn(first - PAGE));
  next.addEventListener("click", () => turn(first + PAGE));
  box.append(back, next, el("span", {class: "shown"},
    total ? `workers ${first + 1}-${first + p.workers.length} of ${total}` : "no worker"),
    el("span", {class: "muted states"}, states));
  return box;
}

function pool(p) {
  let view = poolViews.get(p.name);
  if (!view) {
    const table = el("table", {class: "workers"});
    table.append(el("thead", {},
      row(["worker", "job", "host", "state", "task", "for", "held", "done", "restarts", "CPU",
           "memory"], {}, "th")));
    const tbody = el("tbody");
    table.append(tbody);
    view = {section: el("section", {class: "pool", "data-pool": p.name}), table, tbody};
    poolViews.set(p.name, view);
  }
  const total = p.done + p.failed + p.pending + p.running;
  const share = total ? (p.done + p.failed) / total : 0;
  const eta = p.tasks_per_s > 0 ? seconds((p.pending + p.running) / p.tasks_per_s) : "";
  const bar = el("div", {class: "bar"}); bar.append(el("div", {style: `width:${(100 * share).toFixed(1)}%`}));
  const stats = el("div", {class: "stats"});
  stats.append(bar, " ",
    el("span", {class: "progress"}, `${p.done + p.failed} of ${total} tasks`),
    el("span", {class: "rate"}, `${p.tasks_per_s} tasks/s`),
    el("span", {}, eta ? `ETA ${eta}` : ""),
    el("span", {class: "counts"}, `pending ${p.pending} · running ${p.running} · done ${p.done} · failed ${p.failed} · retried ${p.retried}`));
  const parts = [el("h2", {}, `${p.name} (${p.state}, ${p.size} workers)`), stats];
  if (p.durations && p.durations.count) {
    parts.push(el("div", {class: "muted durations"},
      `task time: mean ${seconds(p.durations.sum / p.durations.count)}, ` +
      `median under ${quantile(p.durations, 0.5)}, 99% under ${quantile(p.durations, 0.99)}` +
      (p.latency && p.latency.count ? `; submission to result: median under ${quantile(p.latency, 0.5)}` : "")));
  }
  parts.push(stream(p), pager(p), view.table);
  view.section.replaceChildren(...parts);
  keyedRows(view.tbody, p.workers, w => w.name,
    w => [w.name, w.job_id, w.host, [w.state, "state-" + w.state], w.task || "",
          seconds(w.running_s), w.held, w.done, w.restarts,
          w.cpu_percent === undefined ? "" : `${w.cpu_percent}%`,
          w.rss_mb === undefined ? "" : `${w.rss_mb} MB`],
    w => ({"data-worker": w.name, "data-state": w.state, title: "click: its stacks"}),
    w => showStack(w.name));
  return view.section;
}

function draw(snap) {
  document.getElementById("program").textContent =
    `${(snap.argv || []).join(" ")} (pid ${snap.pid})`;
  document.getElementById("updated").textContent =
    "updated " + new Date(snap.time * 1000).toLocaleTimeString();
  const pools = document.getElementById("pools");
  const names = new Set(snap.pools.map(p => p.name));
  for (const name of [...poolViews.keys()]) if (!names.has(name)) poolViews.delete(name);
  pools.replaceChildren(...(snap.pools.length ? snap.pools.map(pool)
                                               : [el("p", {class: "muted"}, "no pool")]));
  const procs = snap.processes_total === undefined ? snap.processes.length : snap.processes_total;
  document.getElementById("processes-shown").textContent =
    (procs > snap.processes.length ? `(the first ${snap.processes.length} of ${procs}; ` : `(${procs}; `) +
    Object.entries(snap.process_states || {}).sort().map(([s, n]) => `${s} ${n}`).join(" · ") + ")";
  keyedRows(document.querySelector("#processes tbody"), snap.processes, p => p.name,
    p => [p.name, p.job_id, p.host, p.pid, p.state, seconds(p.running_s)],
    p => ({"data-process": p.name}));
  drawCluster(snap.cluster);
  drawOutput(snap.output || []);
  document.getElementById("warnings-total").textContent = `(${snap.warnings_total})`;
  document.getElementById("warnings").replaceChildren(...snap.warnings.slice().reverse().map(
    w => el("li", {}, `${new Date(w.time * 1000).toLocaleTimeString()}  ${w.text}`)));
  document.body.setAttribute("data-updated", String(snap.time));
}

// The jobs' last output, of one job if one is chosen (the choice survives the redraws).
function drawOutput(chunks) {
  const select = document.getElementById("output-of");
  const names = [...new Set(chunks.map(c => c.name))].sort();
  const known = [...select.options].map(o => o.value);
  for (const name of names) {
    if (!known.includes(name)) select.append(el("option", {value: name}, name));
  }
  const chosen = select.value;
  const shown = chunks.filter(c => !chosen || c.name === chosen).slice(-100);
  document.getElementById("output").replaceChildren(...shown.map(c => el(
    "span", {class: c.fd === 2 ? "err" : "out", "data-job": c.name},
    chosen ? c.text : c.text.replace(/^(?=.)/gm, `(${c.name}) `))));
}

// A worker's Python stacks (all its threads), asked of it now (a program's own dashboard).
async function showStack(name) {
  const pre = document.getElementById("stack");
  document.getElementById("stack-of").textContent = name;
  pre.textContent = "asking...";
  try {
    const response = await fetch("api/stack?worker=" + encodeURIComponent(name),
                                 {cache: "no-store", credentials: "same-origin"});
    pre.textContent = await response.text();
  } catch (e) {
    pre.textContent = "the program is not answering";
  }
}

// Each update's time, kept for benchmarks/dashboard_page.py: [fetch and parse ms, draw ms].
const timings = window.fiberTimings = [];

let timer = null;

async function refresh() {
  clearTimeout(timer);
  try {
    const start = performance.now();
    const response = await fetch(`api/snapshot?workers=${workersFrom}:${PAGE}`,
                                 {cache: "no-store", credentials: "same-origin"});
    if (response.ok) {
      const snap = await response.json();
      const fetched = performance.now();
      draw(snap);
      timings.push([fetched - start, performance.now() - fetched]);
      if (timings.length > 100) timings.shift();
    } else document.getElementById("updated").textContent = `the program answered ${response.status}`;
  } catch (e) {
    document.getElementById("updated").textContent = "the program is not answering";
  }
  timer = setTimeout(refresh, 1000);
}

// A page turned: its rows now, not at the next second's update.
function refreshNow() {
  clearTimeout(timer);
  refresh();
}

refresh();
