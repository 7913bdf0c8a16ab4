"""The labelling page itself: one self-contained HTML document (inline CSS and JS, no external
assets) that :mod:`filters.bitext.label_page` serves at ``/``, with round two's part
(:data:`filters.bitext.label_rounds.PAGE_ROUNDS`) before ``</body>``.

``__TITLE__`` and ``__GUIDELINE__`` are replaced, HTML-escaped, when the page is served.
"""

from __future__ import annotations

from filters.bitext.label_rounds import PAGE_ROUNDS

# --- the page -----------------------------------------------------------------------------------
# Every value from the file is put in the page with textContent, never as HTML.

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Label: __TITLE__</title>
<style>
  :root { --good: #1a7f37; --bad: #cf222e; --muted: #656d76; --line: #d0d7de; }
  * { box-sizing: border-box; }
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px;
         padding: 12px 20px 40px; color: #1f2328; }
  h1 { font-size: 18px; margin: 4px 0 10px; }
  #bar { height: 14px; background: #eaeef2; border-radius: 7px; overflow: hidden; }
  #fill { height: 100%; width: 0; background: var(--good); transition: width .2s; }
  #progress-text { color: var(--muted); margin: 4px 0 12px; }
  #card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
  #meta { display: flex; gap: 16px; flex-wrap: wrap; align-items: center; }
  #current-label { font-weight: 700; padding: 2px 10px; border-radius: 10px;
                   background: #eaeef2; }
  #current-label.GOOD { background: var(--good); color: #fff; }
  #current-label.BAD { background: var(--bad); color: #fff; }
  .sides { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; margin-top: 10px; }
  .side h2 { font-size: 13px; color: var(--muted); margin: 0 0 4px; font-weight: 600; }
  .text { font-size: 19px; white-space: pre-wrap; overflow-wrap: anywhere;
          background: #f6f8fa; border-radius: 6px; padding: 10px 12px; min-height: 3em; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 6px 0 0;
       font-size: 13px; color: var(--muted); }
  dt { font-weight: 600; } dd { margin: 0; overflow-wrap: anywhere; }
  #other { margin-top: 8px; font-size: 13px; color: var(--muted); }
  #buttons { margin: 12px 0; display: flex; gap: 8px; flex-wrap: wrap; }
  button { font: inherit; padding: 6px 14px; border-radius: 6px; border: 1px solid var(--line);
           background: #f6f8fa; cursor: pointer; }
  button kbd { font-size: 12px; color: var(--muted); }
  #btn-good { border-color: var(--good); color: var(--good); }
  #btn-bad { border-color: var(--bad); color: var(--bad); }
  #message { min-height: 1.5em; }
  #message.error { color: var(--bad); font-weight: 600; }
  table { border-collapse: collapse; margin-top: 8px; }
  th, td { border: 1px solid var(--line); padding: 3px 10px; text-align: right; }
  th:first-child, td:first-child { text-align: left; }
  #keys { color: var(--muted); font-size: 13px; }
  #guideline { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px;
               padding: 6px 12px; margin: 0 0 10px; }
  #status { margin: 0 0 12px; display: grid; gap: 4px; }
  #enough.ok { color: var(--good); font-weight: 600; }
  #enough.no { color: var(--bad); font-weight: 600; }
  .prov { font-size: 13px; margin-top: 6px; overflow-wrap: anywhere; }
  .prov .where { color: var(--muted); }
  details { font-size: 13px; color: var(--muted); }
  td.yes { color: var(--good); font-weight: 600; } td.no { color: var(--bad); }
</style>
</head>
<body>
<h1>Label mined pairs: <span id="file"></span></h1>
<p id="guideline">__GUIDELINE__</p>
<div id="bar"><div id="fill"></div></div>
<div id="progress-text">loading...</div>
<div id="status"><div id="enough"></div><div id="estimate"></div></div>
<div id="card">
  <div id="meta">
    <span id="position"></span><span id="langs"></span><span id="margin"></span>
    <span id="current-label"></span>
  </div>
  <div class="sides">
    <div class="side"><h2 id="src-head">source</h2><div class="text" id="src" dir="auto"></div>
      <div class="prov"><a id="src-link" target="_blank" rel="noopener noreferrer"></a>
        <span class="where" id="src-where"></span></div>
      <details><summary>all fields</summary><dl id="src-prov"></dl></details></div>
    <div class="side"><h2 id="trg-head">target</h2><div class="text" id="trg" dir="auto"></div>
      <div class="prov"><a id="trg-link" target="_blank" rel="noopener noreferrer"></a>
        <span class="where" id="trg-where"></span></div>
      <details><summary>all fields</summary><dl id="trg-prov"></dl></details></div>
  </div>
  <div id="other"></div>
</div>
<div id="buttons">
  <button id="btn-good" data-action="good">GOOD <kbd>g</kbd></button>
  <button id="btn-bad" data-action="bad">BAD <kbd>b</kbd></button>
  <button id="btn-skip" data-action="skip">skip <kbd>s / space</kbd></button>
  <button id="btn-undo" data-action="undo">undo <kbd>u</kbd></button>
  <button id="btn-prev" data-action="prev">&larr; previous</button>
  <button id="btn-next" data-action="next">next &rarr;</button>
</div>
<div id="message"></div>
<p id="keys">Keys: <b>g</b> GOOD, <b>b</b> BAD, <b>s</b> or <b>space</b> skip to the next
unlabelled pair, <b>u</b> undo the last label, <b>&larr; &rarr;</b> previous / next pair.
Every label is saved to the file at once; closing this tab loses nothing.</p>
<h2 style="font-size:15px">Per language pair</h2>
<table id="summary"><thead><tr><th>pair</th><th>GOOD</th><th>BAD</th><th>unlabelled</th>
<th>total</th><th title="its own labels pass combine's check">enough</th></tr></thead>
<tbody></tbody></table>
<h2 style="font-size:15px">Per language pair and margin stratum</h2>
<table id="strata"><thead><tr><th>pair</th><th>stratum</th><th>margins</th><th>GOOD</th>
<th>BAD</th><th>unlabelled</th><th>total</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let rows = [], cur = 0, progress = {labelled: 0, total: 0}, pairs = [], canUndo = false;
let strata = [], enough = null, version = 0, estimating = false;
let queue = Promise.resolve();

async function api(path, body) {
  const opts = body === undefined ? {} : {method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json"}};
  let r;
  try { r = await fetch(path, opts); }
  catch (e) { throw new Error("the labelling server is not running (nothing was saved)"); }
  let data = {};
  try { data = await r.json(); } catch (e) { data = {error: r.statusText}; }
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function show(text, error) {
  const m = $("message");
  m.textContent = text || "";
  m.className = error ? "error" : "";
}

function take(d) {
  if (d.progress) progress = d.progress;
  if (d.pairs) pairs = d.pairs;
  if (d.strata) strata = d.strata;
  if (d.enough) enough = d.enough;
  if (d.version !== undefined) version = d.version;
  if (d.can_undo !== undefined) canUndo = d.can_undo;
}

const pct = (x) => (x === null || x === undefined) ? "?" : (100 * x).toFixed(1) + "%";

function renderEstimate(e) {
  const el = $("estimate");
  if (!e.ok) { el.textContent = "Estimate: " + e.why; return; }
  const [lo, hi] = e.precision_ci || [null, null];
  const thr = e.threshold === null ? "?" : e.threshold.toPrecision(3);
  el.textContent = `Estimated GOOD at the threshold: ${pct(e.precision)} `
    + `[${pct(lo)}, ${pct(hi)}] (${Math.round(100 * e.confidence)}% interval), `
    + `combined score >= ${thr}, on ${e.labelled} labels; target ${pct(e.target)} `
    + (e.target_reached ? "reached" : "NOT reached (the best reachable threshold)");
}

async function refreshEstimate() {
  if (estimating) return;  // one at a time; the loop fetches again if labels came meanwhile
  estimating = true;
  try {
    for (;;) {
      const e = await api("/api/estimate");
      renderEstimate(e);
      document.body.dataset.estimateVersion = e.version;
      if (e.version >= version) break;
    }
  } catch (err) {
    $("estimate").textContent = "Estimate: " + err.message;
  } finally {
    estimating = false;
  }
}

function renderEnough() {
  const el = $("enough");
  if (!enough) return;
  el.className = enough.ok ? "ok" : "no";
  el.textContent = enough.ok
    ? `Enough to continue: combine accepts these ${enough.labelled} labels `
      + `(${enough.GOOD} GOOD, ${enough.BAD} BAD)`
    : "Not enough to continue yet: " + enough.why;
  if (!enough.matched) el.textContent += " (labels in this file; not matched to the mined pairs)";
  document.body.dataset.enough = enough.ok ? "1" : "0";
}

function fillTables() {
  const tb = $("summary").tBodies[0];
  tb.replaceChildren();
  for (const p of pairs) {
    const tr = tb.insertRow();
    for (const v of [p.pair, p.GOOD, p.BAD, p.unlabelled, p.total])
      tr.insertCell().textContent = v;
    const verdict = enough && enough.pairs[p.pair], td = tr.insertCell();
    td.textContent = verdict ? (verdict.ok ? "yes" : "no") : "";
    td.className = verdict ? (verdict.ok ? "yes" : "no") : "";
    td.title = verdict && verdict.why ? verdict.why : "";
  }
  const sb = $("strata").tBodies[0];
  sb.replaceChildren();
  for (const s of strata) {
    const tr = sb.insertRow();
    for (const v of [s.pair, s.stratum, s.margins, s.GOOD, s.BAD, s.unlabelled, s.total])
      tr.insertCell().textContent = v;
  }
}

function fillSource(side, view) {
  const a = $(side + "-link");
  const ok = view.url && /^https?:\/\//i.test(view.url);
  a.textContent = ok ? (view.text || view.url) : (view.text || "");
  if (ok) a.href = view.url; else a.removeAttribute("href");
  $(side + "-where").textContent = view.locator ? " \u00b7 " + view.locator : "";
}

function nextUnlabelled(from) {
  for (let k = 1; k < rows.length; k++) {
    const i = (from + k) % rows.length;
    if (!rows[i].label) return i;
  }
  return -1;
}

function fillDl(dl, obj) {
  dl.replaceChildren();
  for (const [k, v] of Object.entries(obj)) {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k; dd.textContent = v === "" ? "-" : v;
    dl.append(dt, dd);
  }
}

function render() {
  const done = progress.labelled, total = progress.total;
  $("fill").style.width = (total ? 100 * done / total : 0) + "%";
  $("progress-text").textContent = `${done} / ${total} labelled`
    + (total && done === total ? " - all done" : "");
  document.body.dataset.labelled = done;
  renderEnough();
  fillTables();
  $("btn-undo").disabled = !canUndo;
  if (!rows.length) return;
  const r = rows[cur];
  document.body.dataset.index = cur;
  $("position").textContent = `pair ${cur + 1} of ${rows.length}`;
  $("langs").textContent = r.src_lang || r.trg_lang ? `${r.src_lang} \u2192 ${r.trg_lang}` : "";
  $("margin").textContent = r.margin_text === "" ? "" : "margin " + r.margin_text;
  const lab = $("current-label");
  lab.textContent = r.label || "unlabelled";
  lab.className = r.label;
  $("src").textContent = r.src; $("src").lang = r.src_lang;
  $("trg").textContent = r.trg; $("trg").lang = r.trg_lang;
  $("src-head").textContent = "source" + (r.src_lang ? ` (${r.src_lang})` : "");
  $("trg-head").textContent = "target" + (r.trg_lang ? ` (${r.trg_lang})` : "");
  fillSource("src", r.src_source);
  fillSource("trg", r.trg_source);
  fillDl($("src-prov"), r.src_provenance);
  fillDl($("trg-prov"), r.trg_provenance);
  $("other").textContent = Object.entries(r.other).map(([k, v]) => `${k}: ${v}`).join(" \u00b7 ");
}

async function setLabel(value) {
  const i = cur;
  const d = await api("/api/label", {index: i, label: value});
  rows[i].label = d.label;
  take(d);
  const j = nextUnlabelled(i);
  cur = j >= 0 ? j : Math.min(i + 1, rows.length - 1);
  show(j >= 0 || rows[i].label === "" ? "" : "All pairs are labelled (saved).");
  render();
  refreshEstimate();
}

const actions = {
  good: () => setLabel("GOOD"),
  bad: () => setLabel("BAD"),
  skip: async () => {
    const j = nextUnlabelled(cur);
    cur = j >= 0 ? j : Math.min(cur + 1, rows.length - 1);
    show(""); render();
  },
  undo: async () => {
    const d = await api("/api/undo", {});
    rows[d.index].label = d.label;
    take(d);
    cur = d.index;
    show(`undone: pair ${d.index + 1} is ${d.label || "unlabelled"} again`);
    render();
    refreshEstimate();
  },
  prev: async () => { cur = Math.max(cur - 1, 0); show(""); render(); },
  next: async () => { cur = Math.min(cur + 1, rows.length - 1); show(""); render(); },
};

function run(name) {
  queue = queue.then(actions[name]).catch((e) => show(e.message, true));
}

const KEYS = {g: "good", b: "bad", s: "skip", " ": "skip", u: "undo", ArrowLeft: "prev",
              ArrowUp: "prev", ArrowRight: "next", ArrowDown: "next"};
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const name = KEYS[e.key.length === 1 ? e.key.toLowerCase() : e.key];
  if (!name) return;
  e.preventDefault();
  run(name);
});
for (const b of document.querySelectorAll("button[data-action]")) {
  b.addEventListener("mousedown", (e) => e.preventDefault());  // keep the focus off buttons
  b.addEventListener("click", () => run(b.dataset.action));
}

queue = queue.then(async () => {
  const s = await api("/api/state");
  rows = s.rows; take(s);
  $("file").textContent = s.file;
  const first = rows.findIndex((r) => !r.label);
  cur = first >= 0 ? first : 0;
  render();
  document.body.dataset.ready = "1";
  refreshEstimate();
}).catch((e) => show(e.message, true));
</script>
</body>
</html>
""".replace("</body>", PAGE_ROUNDS + "</body>")  # round two's part (label_rounds)
