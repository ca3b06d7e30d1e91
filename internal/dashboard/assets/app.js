// The page only shows what the server sends: each snapshot replaces the
// last. The charts come drawn (SVG); nothing here reaches another origin.
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (x) => x === null || x === undefined ? "–" : Number(x).toPrecision(6).replace(/\.?0+$/, "");
let charts = {};

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function rows(id, list, fill) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const x of list || []) {
    const tr = document.createElement("tr");
    fill(tr, x);
    body.appendChild(tr);
  }
}

function show(v) {
  $("run").textContent = v.run;
  $("phase").textContent = v.phase;
  $("evals").textContent = v.evaluations;
  $("budget").textContent = v.budget;
  $("rate").textContent = v.rate ? v.rate.toFixed(2) : "–";
  $("eta").textContent = v.eta || "–";
  $("best").textContent = fmt(v.best);
  $("best-id").textContent = v.best_id ? "(" + v.best_id + ")" : "";
  $("hv-box").hidden = v.hypervolume === null;
  $("hv").textContent = fmt(v.hypervolume);
  $("statuses").textContent = Object.entries(v.by_status).map(([k, n]) => k + " " + n).join(", ") || "–";
  $("controller").textContent = v.controller;
  const w = $("warnings");
  w.replaceChildren();
  for (const text of v.warnings || []) {
    const li = document.createElement("li");
    li.textContent = text;
    w.appendChild(li);
  }
  const s = v.slots;
  $("slot-counts").textContent = s.total + " slots: " + s.busy + " busy, " + s.idle + " idle, " + s.quarantined + " quarantined" +
    (s.per_cell > 1 ? " (each cell " + s.per_cell + " slots)" : "");
  strip(s.cells);
  const box = $("charts");
  for (const [name, svg] of Object.entries(v.charts)) {
    if (!charts[name]) {
      charts[name] = document.createElement("figure");
      charts[name].id = "chart-" + name;
      box.appendChild(charts[name]);
    }
    charts[name].innerHTML = svg;
  }
  rows("hosts", v.hosts, (tr, h) => {
    cell(tr, h.host); cell(tr, h.workers + " (" + h.live + ")"); cell(tr, h.slots); cell(tr, h.busy);
    cell(tr, h.quarantined); cell(tr, h.done); cell(tr, h.state);
  });
  const front = v.front && v.front.length;
  $("pool-title").textContent = front ? "Pool's first front" : "Pool (fittest first)";
  rows("pool", front ? v.front : v.pool, (tr, d) => {
    const a = document.createElement("a");
    a.textContent = d.id;
    a.addEventListener("click", () => openDesign(d.seq, d.id));
    cell(tr, "").appendChild(a);
    cell(tr, fmt(d.fitness)); cell(tr, d.origin); cell(tr, d.genome, "g");
  });
  document.body.dataset.evaluations = v.evaluations;
  document.body.dataset.quarantined = s.quarantined;
  $("updated").textContent = "last snapshot " + v.at;
}

// The slot strip comes as one character a cell (see stripCells in
// svg.go): q quarantined, g worker gone, b busy, i idle, 1-9 tenths busy.
const SVG = "http://www.w3.org/2000/svg";
function strip(cells) {
  const n = cells.length, cols = Math.min(n, 50), size = n <= 100 ? 16 : 10;
  const svg = document.createElementNS(SVG, "svg");
  const w = Math.max(cols * (size + 1), 1), h = Math.max(Math.ceil(n / Math.max(cols, 1)) * (size + 1), 1);
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  for (let i = 0; i < n; i++) {
    const c = cells[i], r = document.createElementNS(SVG, "rect");
    r.setAttribute("x", (i % cols) * (size + 1));
    r.setAttribute("y", Math.floor(i / cols) * (size + 1));
    r.setAttribute("width", size);
    r.setAttribute("height", size);
    const state = { q: "quarantined", g: "gone", b: "busy", i: "idle" }[c] || "busy";
    r.setAttribute("data-state", state);
    r.setAttribute("class", state);
    if (c >= "1" && c <= "9") r.setAttribute("fill-opacity", (0.2 + 0.08 * Number(c)).toFixed(2));
    svg.appendChild(r);
  }
  $("strip").replaceChildren(svg);
}

async function openDesign(seq, id) {
  $("design").hidden = false;
  $("design-id").textContent = id;
  const r = await fetch("design/" + seq);
  $("design-body").textContent = r.ok ? JSON.stringify(await r.json(), null, 2) : "not found: " + r.status;
}

function connect() {
  const es = new EventSource("events");
  es.addEventListener("snapshot", (e) => {
    $("conn").textContent = "live";
    $("conn").className = "conn";
    show(JSON.parse(e.data));
  });
  es.addEventListener("bye", (e) => lost(e.data));
  es.onerror = () => lost("the dashboard's process (the controller, or evoq dashboard) does not answer; retrying");
}

function lost(why) {
  $("conn").textContent = "disconnected: " + why;
  $("conn").className = "conn lost";
}

$("design-close").addEventListener("click", () => { $("design").hidden = true; });
// The token, once given, lives in a cookie: keep it out of the address
// bar, the history and a screenshot of the page.
if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname);
connect();
