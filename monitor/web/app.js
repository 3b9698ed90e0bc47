// kclaw dashboard: reads the JSON API (/api/...), goes live over NNG's
// WebSocket transport (ws://host/ws, SP subprotocol), and falls back to
// polling the event log when the socket is down. No build step.
//
// Two views: the task list at / and one task's page at /task/ID (linkable;
// #task=ID is taken too). The monitor serves this page for both paths.
"use strict";

const state = { tasks: [], selected: null, result: null, taskEvents: [], lastSeq: 0, candSel: null };
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
const fmt = (x, d = 3) => (typeof x === "number" && x > 0 ? x.toFixed(d) : "–");
const fmtMs = (x) => (typeof x === "number" && x > 0 ? x.toFixed(4) + " ms" : "–");
const fmtInt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");
const fmtUsd = (c) => (typeof c === "number" ? "$" + c.toFixed(c > 0 && c < 1 ? 4 : 2) : "–");
// Enums as upper-case names whatever the JSON convention ("DONE", "done").
const up = (s) => String(s ?? "").toUpperCase();
const FINAL = new Set(["DONE", "FAILED", "CANCELLED"]);

// Errors come as the CLI's --json prints them: {"error": {"code", "exit",
// "message"}}. Without the deployment's token the API answers 401: the
// login page sets the cookie and comes back.
async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (r.status === 401) { location.href = "/login"; throw new Error("log in first"); }
  const j = await r.json();
  if (!r.ok) throw new Error((j.error && j.error.message) || r.statusText);
  return j;
}

function speedup(t) {
  if (t.speedup > 0) return t.speedup;
  return t.best_ms > 0 && t.reference_ms > 0 ? t.reference_ms / t.best_ms : 0;
}

// Why a task ended (its record's error: "stopped: round budget spent", the
// failure's reason), or what it is doing.
function why(t) {
  const st = up(t.state);
  if (FINAL.has(st)) return t.error || (st === "CANCELLED" ? "cancelled" : "");
  return t.state_detail || "running";
}

function roundText(t) {
  return t.max_rounds > 0 ? `${t.round}/${t.max_rounds}` : `${t.round}`;
}

// ------------------------------------------------------------- routing

function taskFromLocation() {
  const m = location.pathname.match(/^\/task\/([A-Za-z0-9_-]+)\/?$/);
  if (m) return m[1];
  const h = location.hash.match(/^#task=([A-Za-z0-9_-]+)$/);
  if (h) { history.replaceState(null, "", "/task/" + h[1]); return h[1]; }
  return null;
}

function nav(path) {
  history.pushState(null, "", path);
  route();
}

async function route() {
  const id = taskFromLocation();
  state.selected = id;
  state.candSel = null;
  $("list-view").hidden = id !== null;
  $("task-view").hidden = id === null;
  document.title = id ? `kclaw · task ${id}` : "kclaw";
  if (id) { state.result = null; state.taskEvents = []; await refreshDetail(); }
  else await refreshTasks();
}

window.addEventListener("popstate", route);
document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (a && !e.ctrlKey && !e.metaKey && !e.shiftKey && e.button === 0) { e.preventDefault(); nav(a.getAttribute("href")); }
});

// ----------------------------------------------------------- the list

async function refreshHealth() {
  try {
    const h = await api("/api/health");
    $("health").textContent = `v${h.version} · ${h.tasks_active} active / ${h.tasks_total} tasks · seq ${h.last_seq}`;
    $("procs").tBodies[0].innerHTML = (h.processes || []).map((p) =>
      `<tr><td>${esc(p.name)}</td><td>${p.pid}</td><td>${esc(up(p.state))}</td><td>${p.restarts}</td></tr>`).join("");
  } catch (e) {
    $("health").textContent = "orchestrator unreachable: " + e.message;
  }
}

async function refreshTasks() {
  try {
    const l = await api("/api/tasks");
    state.tasks = l.tasks || [];
  } catch (e) { return; }
  $("tasks").tBodies[0].innerHTML = state.tasks.map((t) => {
    const name = t.spec ? t.spec.name : "", w = why(t), st = up(t.state);
    return `<tr class="task" data-id="${esc(t.id)}">` +
      `<td><a href="/task/${esc(t.id)}" data-nav title="${esc(t.id)}">${esc(t.id)}</a></td>` +
      `<td title="${esc(name)}">${esc(name)}</td>` +
      `<td class="st-${esc(st)}">${esc(st)}</td><td class="num">${roundText(t)}</td>` +
      `<td class="num">${fmt(t.best_ms, 4)}</td><td class="num">${fmt(speedup(t), 2)}</td>` +
      `<td class="num">${fmtInt(t.tokens || 0)}</td><td class="num">${fmtUsd(t.cost_usd)}</td>` +
      `<td class="${FINAL.has(st) ? "" : "muted"}" title="${esc(w)}">${esc(w)}</td></tr>`;
  }).join("");
  for (const tr of $("tasks").tBodies[0].rows)
    tr.onclick = (e) => { if (!e.target.closest("a")) nav("/task/" + tr.dataset.id); };
}

// ------------------------------------------------------- a task's page

async function refreshDetail() {
  const id = state.selected;
  if (!id) return;
  let r, evs = [];
  try {
    r = await api("/api/result/" + encodeURIComponent(id));
  } catch (e) {
    $("detail-title").textContent = "task " + id + ": " + e.message;
    $("facts").innerHTML = "";
    return;
  }
  try {
    for (let since = 0; ;) {
      const page = (await api(`/api/events?task=${encodeURIComponent(id)}&since=${since}&limit=1000`)).events || [];
      evs = evs.concat(page);
      if (page.length < 1000) break;
      since = page[page.length - 1].seq;
    }
  } catch (e) { /* the page shows without its events */ }
  if (state.selected !== id) return;
  state.result = r;
  state.taskEvents = evs;
  const t = r.task || {};
  const st = up(t.state);
  $("detail-title").innerHTML = `Task <span class="mono">${esc(t.id)}</span> · ${esc(t.spec ? t.spec.name : "")} · ` +
    `<span class="st-${esc(st)}">${esc(st)}</span>`;
  facts(t, r.best);
  usage(t);
  const hist = r.history || [];
  plot(hist, t, evs);
  $("history").tBodies[0].innerHTML = hist.map((h, i) => {
    const c = h.candidate || {}, e = h.eval || {}, tm = e.timing || {};
    return `<tr class="task" data-i="${i}"><td class="mono">${esc(c.id)}</td><td class="num">${c.round}</td><td>${esc(c.origin)}</td>` +
      `<td>${esc(c.method)}</td><td class="st-${esc(up(e.status))}">${esc(up(e.status))}</td>` +
      `<td class="num">${fmt(tm.median_ms, 4)}</td><td class="num">${fmt(candSpeedup(h, t.reference_ms), 2)}</td></tr>`;
  }).join("");
  for (const tr of $("history").tBodies[0].rows) tr.onclick = () => { state.candSel = +tr.dataset.i; showCandidate(); };
  showCandidate();
  $("task-events").innerHTML = evs.slice().reverse().map((ev) => `<div>${esc(eventLine(ev))}</div>`).join("");
}

function facts(t, best) {
  const st = up(t.state), u = t.usage || [];
  const sum = (k) => u.reduce((a, x) => a + (x[k] || 0), 0);
  const sp = speedup(t);
  const rows = [
    ["state", "State", `<span class="st-${esc(st)}">${esc(st)}</span>` + (t.state_detail ? ` <span class="muted">${esc(t.state_detail)}</span>` : "")],
    ["stop", FINAL.has(st) ? "Why it ended" : "Progress", esc(why(t)) || "–"],
    // A job whose model calls fail, while it is retried (cleared once one succeeds).
    ...(t.last_agent_error ? [["agent", "Agent error", esc(t.last_agent_error) +
      (t.last_agent_error_unix_ms ? ` <span class="muted">(${Math.max(0, Math.round((Date.now() - Number(t.last_agent_error_unix_ms)) / 1000))} s ago)</span>` : "")]] : []),
    ["rounds", "Rounds", `${roundText(t)}` + (t.failed_rounds ? ` (${t.failed_rounds} failed)` : "") + (t.token_budget ? ` · token budget ${fmtInt(t.token_budget)}` : "")],
    ["reference", "Reference time", fmtMs(t.reference_ms) + (t.reference_median_ms > 0 && Math.abs(t.reference_median_ms - t.reference_ms) > 1e-9 ? ` <span class="muted">(median over the task ${fmtMs(t.reference_median_ms)})</span>` : "")],
    ["best", "Best time", fmtMs(t.best_ms) + (t.best_id ? ` <span class="muted mono">${esc(t.best_id)}</span>` : "")],
    ["base", "Base time", fmtMs(t.base_ms) + (t.base_id ? ` <span class="muted mono">${esc(t.base_id)}</span>` : "")],
    ["speedup", "Speedup", sp > 0 ? sp.toFixed(2) + "× over the reference" + (t.compile_speedup > 0 ? `, ${t.compile_speedup.toFixed(2)}× over torch.compile` : "") : "–"],
    ["tokens", "Tokens", `${fmtInt(t.tokens || 0)} <span class="muted">(prompt ${fmtInt(sum("prompt_tokens"))}, completion ${fmtInt(sum("completion_tokens"))}, ` +
      `reasoning ${fmtInt(sum("reasoning_tokens"))}, cached ${fmtInt(sum("cached_tokens"))}; ${fmtInt(sum("calls"))} calls)</span>`],
    ["cost", "Cost", typeof t.cost_usd === "number" ? fmtUsd(t.cost_usd) : (u.length ? `– <span class="muted">(a model without a price: add it to "prices" in kclaw.json)</span>` : "–")],
    ["download", "Best kernel", best && best.candidate ? [
      `<a href="/api/result/${esc(t.id)}/kernel.tar" download>kernel.tar</a> (what <code>kclaw result --out</code> writes: kernel, plan, C launcher, model_new.py, README)`,
      `<a href="/api/result/${esc(t.id)}/kernel.cu" download>kernel.cu</a>`,
      `<a href="/api/result/${esc(t.id)}/plan.json" download>plan.json</a>`,
      `<a href="/api/result/${esc(t.id)}/model_new.py" download>model_new.py</a>`].join(" · ") +
      ` <span class="muted">or: kclaw result ${esc(t.id)} --out DIR</span>` : "no correct kernel"],
    ["time", "Submitted", t.created_unix_ms ? new Date(t.created_unix_ms).toISOString().replace("T", " ").slice(0, 19) + " UTC" +
      (t.finished_unix_ms ? `, ended after ${((t.finished_unix_ms - t.created_unix_ms) / 1000).toFixed(1)} s` : "") : "–"],
  ];
  $("facts").innerHTML = rows.map(([k, label, v]) => `<dt>${label}</dt><dd data-field="${k}">${v}</dd>`).join("");
}

function usage(t) {
  $("usage").tBodies[0].innerHTML = (t.usage || []).map((u) =>
    `<tr><td>${esc(String(u.role || "").toLowerCase())}</td><td>${esc(u.model)}</td><td class="num">${u.calls || 0}</td>` +
    `<td class="num">${u.failed_calls || 0}</td><td class="num">${fmtInt(u.prompt_tokens || 0)}</td>` +
    `<td class="num">${fmtInt(u.completion_tokens || 0)}</td><td class="num">${fmtInt(u.reasoning_tokens || 0)}</td>` +
    `<td class="num">${fmtInt(u.cached_tokens || 0)}</td><td class="num">${fmtUsd(u.cost_usd)}</td></tr>`).join("");
}

function candSpeedup(h, ref) {
  const e = h.eval || {};
  if (up(e.status) !== "OK") return 0;
  if (e.speedup > 0) return e.speedup;
  return ref > 0 && e.timing && e.timing.median_ms > 0 ? ref / e.timing.median_ms : 0;
}

// Speedup per round. Best so far (solid blue) and the base the optimiser
// works from (dashed orange, drawn over the best so that it shows where
// the two coincide), both as step lines; the seeds labelled at round 0
// (hollow at the axis: no correct kernel); other correct candidates as
// grey dots. The base follows the BASE_PROMOTED events.
function plot(hist, task, evs) {
  const svg = $("plot"), W = 760, H = 280, L = 48, R = 170, T = 24, B = 36;
  const ref = task.reference_ms || 0;
  const byId = new Map();
  let seedNo = 0;
  const pts = hist.map((h) => {
    const c = h.candidate || {}, e = h.eval || {};
    const seed = c.origin === "generator";
    const p = { id: c.id, x: seed ? 0 : c.round || 0, s: candSpeedup(h, ref), status: up(e.status), seed, n: seed ? ++seedNo : 0 };
    byId.set(c.id, p);
    return p;
  });
  const ok = pts.filter((p) => p.s > 0);
  const maxX = Math.max(1, task.round || 0, ...pts.map((p) => p.x));
  const best = [], base = [];
  for (let x = 0, b = 0; x <= maxX; x++) {
    for (const p of ok) if (p.x === x) b = Math.max(b, p.s);
    if (b > 0) best.push({ x, s: b });
  }
  const promos = (evs || []).filter((e) => up(e.kind) === "BASE_PROMOTED" && byId.has(e.candidate_id))
    .map((e) => ({ x: e.round || 0, s: byId.get(e.candidate_id).s })).filter((p) => p.s > 0);
  for (let x = 0, b = 0, i = 0; x <= maxX; x++) {
    for (; i < promos.length && promos[i].x <= x; i++) b = promos[i].s;
    if (b > 0) base.push({ x, s: b });
  }
  const maxY = Math.max(1, ...ok.map((p) => p.s)) * 1.12;
  const px = (x) => L + (x / maxX) * (W - L - R), py = (y) => H - B - (y / maxY) * (H - T - B);
  const step = (a) => a.length ? "M" + a.map((p, i) => (i ? `H${px(p.x).toFixed(1)}V${py(p.s).toFixed(1)}` : `${px(p.x).toFixed(1)},${py(p.s).toFixed(1)}`)).join("") +
    `H${px(maxX).toFixed(1)}` : "";
  let g = "";
  // Axes, ticks, the reference's 1x.
  g += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#999"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#999"/>`;
  for (const y of [0, maxY / 1.12 / 2, maxY / 1.12])
    g += `<text x="${L - 6}" y="${py(y) + 4}" font-size="11" text-anchor="end">${y.toFixed(y < 10 ? 1 : 0)}×</text>`;
  const xstep = Math.max(1, Math.ceil(maxX / 12));
  for (let x = 0; x <= maxX; x += xstep)
    g += `<text x="${px(x)}" y="${H - B + 14}" font-size="11" text-anchor="middle">${x === 0 ? "seeds" : x}</text>`;
  g += `<text x="${(L + W - R) / 2}" y="${H - 6}" font-size="11" text-anchor="middle">round</text>`;
  g += `<line x1="${L}" y1="${py(1)}" x2="${W - R}" y2="${py(1)}" stroke="#bbb" stroke-dasharray="2 3"/>` +
    `<text x="${W - R + 4}" y="${py(1) + 4}" font-size="10" fill="#888">reference 1×</text>`;
  g += `<g id="plot-cands">` + ok.filter((p) => !p.seed).map((p) =>
    `<circle cx="${px(p.x)}" cy="${py(p.s)}" r="2.5" fill="#a8a8a8"><title>${esc(p.id)}: ${p.s.toFixed(2)}×</title></circle>`).join("") + `</g>`;
  g += `<g id="plot-best"><path d="${step(best)}" fill="none" stroke="#0f62fe" stroke-width="3.5" stroke-linejoin="round"/>` +
    best.map((p) => `<circle cx="${px(p.x)}" cy="${py(p.s)}" r="4.5" fill="#0f62fe"><title>round ${p.x}: best ${p.s.toFixed(2)}×</title></circle>`).join("") + `</g>`;
  g += `<g id="plot-base"><path d="${step(base)}" fill="none" stroke="#ff832b" stroke-width="2" stroke-dasharray="7 4"/>` +
    base.map((p) => `<rect x="${px(p.x) - 3}" y="${py(p.s) - 3}" width="6" height="6" fill="#fff" stroke="#ff832b" stroke-width="1.5"><title>round ${p.x}: base ${p.s.toFixed(2)}×</title></rect>`).join("") + `</g>`;
  // Seeds: a triangle each at round 0, labelled; failed ones hollow on the
  // axis with their status.
  // The labels stack upwards from the highest seed, each with a thin line
  // to its marker, on a white halo so lines do not cross the text.
  const seeds = pts.filter((p) => p.seed), cx = px(0);
  const top = Math.min(H - B, ...seeds.map((p) => (p.s > 0 ? py(p.s) : H - B)));
  const labelY = (i) => Math.max(T + 10, top - 14 - 13 * (seeds.length - 1 - i));
  g += `<g id="plot-seeds">` + seeds.map((p, i) => {
    const y = p.s > 0 ? py(p.s) : H - B, ly = labelY(i);
    const tri = `${cx},${y - 6} ${cx - 5},${y + 3} ${cx + 5},${y + 3}`;
    return `<line x1="${cx}" y1="${y}" x2="${cx + 14}" y2="${ly - 4}" stroke="#198038" stroke-width="0.7"/>` +
      `<polygon points="${tri}" fill="${p.s > 0 ? "#198038" : "#fff"}" stroke="#198038" stroke-width="1.5"><title>${esc(p.id)}</title></polygon>` +
      `<text class="seed-label" x="${cx + 16}" y="${ly}" font-size="11" fill="#198038" paint-order="stroke" stroke="#fff" stroke-width="3">seed ${p.n}: ${p.s > 0 ? p.s.toFixed(2) + "×" : esc(p.status || "no result")}</text>`;
  }).join("") + `</g>`;
  // The legend, right of the plot.
  const lx = W - R + 14;
  g += `<g id="plot-legend" font-size="11">` +
    `<line x1="${lx}" y1="${T + 8}" x2="${lx + 22}" y2="${T + 8}" stroke="#0f62fe" stroke-width="3.5"/><text x="${lx + 28}" y="${T + 12}">best so far</text>` +
    `<line x1="${lx}" y1="${T + 28}" x2="${lx + 22}" y2="${T + 28}" stroke="#ff832b" stroke-width="2" stroke-dasharray="7 4"/><text x="${lx + 28}" y="${T + 32}">base (optimised from)</text>` +
    `<polygon points="${lx + 11},${T + 42} ${lx + 6},${T + 51} ${lx + 16},${T + 51}" fill="#198038"/><text x="${lx + 28}" y="${T + 52}">seed (hollow: failed)</text>` +
    `<circle cx="${lx + 11}" cy="${T + 68}" r="2.5" fill="#a8a8a8"/><text x="${lx + 28}" y="${T + 72}">other correct kernel</text></g>`;
  if (!ok.length) g += `<text x="${(L + W - R) / 2}" y="${(T + H - B) / 2}" font-size="12" text-anchor="middle" fill="#888">no correct kernel yet</text>`;
  svg.innerHTML = g;
}

// A line diff (LCS) between a candidate and its parent.
function diff(a, b) {
  const A = a.split("\n"), B = b.split("\n"), n = A.length, m = B.length;
  if (n * m > 4e6) return `<pre>(too large to diff)</pre>`;
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && A[i] === B[j]) { out.push("  " + esc(A[i])); i++; j++; }
    else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) { out.push(`<span class="add">+ ${esc(B[j])}</span>`); j++; }
    else { out.push(`<span class="del">- ${esc(A[i])}</span>`); i++; }
  }
  return `<pre>${out.join("\n")}</pre>`;
}

function showCandidate() {
  const hist = (state.result && state.result.history) || [];
  const h = hist[state.candSel ?? hist.length - 1];
  if (!h) { $("cand").innerHTML = ""; return; }
  const c = h.candidate || {}, e = h.eval || {};
  let html = `<h2>Candidate ${esc(c.id)} (${esc(c.origin)}${c.method ? ", " + esc(c.method) : ""})</h2>`;
  if (e.message) html += `<p>${esc(e.message)}</p>`;
  if (h.plan && h.plan.method) {
    html += `<h2>Plan: ${esc(h.plan.method)}</h2><ol>${(h.plan.steps || []).map((s) => `<li>${esc(s)}</li>`).join("")}</ol>`;
    if (h.plan.rationale) html += `<p class="muted">${esc(h.plan.rationale)}</p>`;
  }
  if ((h.methods || []).length) {
    html += `<h2>Retrieval trace</h2><div class="scroll-x"><table><tr><th>method</th><th>score</th><th>rule</th><th>matched</th><th>vetoed</th></tr>` +
      h.methods.map((m) => `<tr><td>${esc(m.method)}</td><td>${fmt(m.score, 2)}</td><td>${esc(m.rule)}</td>` +
        `<td>${esc((m.matched || []).join(", "))}</td><td>${esc((m.vetoed || []).join("; "))}</td></tr>`).join("") + `</table></div>`;
  }
  if (h.diagnosis && h.diagnosis.root_cause) html += `<h2>Diagnosis</h2><p>${esc(h.diagnosis.root_cause)}</p><p>${esc(h.diagnosis.fix)}</p>`;
  const parent = hist.find((p) => p.candidate && p.candidate.id === c.parent_id);
  if (parent) html += `<h2>Diff against parent ${esc(c.parent_id)}</h2>` + diff(parent.candidate.source || "", c.source || "");
  else html += `<h2>Source</h2><pre>${esc(c.source)}</pre>`;
  $("cand").innerHTML = html;
}

// Live events. Sequence numbers tell us what we missed: on a gap (or when
// the socket is down) the event log fills it.
function eventLine(ev) {
  return `#${ev.seq} ${ev.kind} ${ev.task_id || ev.process || ""} ${ev.state || ""} ${ev.detail || ""}`;
}

let refreshTimer = null;
function scheduleRefresh(detail) {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    if (state.selected) { if (detail) await refreshDetail(); } else await refreshTasks();
    await refreshHealth();
  }, 150);
}

function onEvent(ev) {
  if (ev.seq && ev.seq <= state.lastSeq) return;
  if (ev.seq) state.lastSeq = ev.seq;
  const line = document.createElement("div");
  line.textContent = eventLine(ev);
  const box = $("events");
  box.prepend(line);
  while (box.childNodes.length > 200) box.removeChild(box.lastChild);
  scheduleRefresh(state.selected && ev.task_id === state.selected);
}

async function catchUp() {
  try {
    for (;;) {
      const r = await api(`/api/events?since=${state.lastSeq}&limit=500`);
      const evs = r.events || [];
      evs.forEach(onEvent);
      if (evs.length === 0) break;
    }
  } catch (e) { /* the orchestrator may be restarting */ }
}

function connect() {
  const ws = new WebSocket(`ws://${location.host}/ws`, ["pub.sp.nanomsg.org"]);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => { $("conn").className = "live"; $("conn").title = "live"; catchUp(); };
  ws.onmessage = async (m) => {
    const text = typeof m.data === "string" ? m.data : new TextDecoder().decode(m.data);
    let ev;
    try { ev = JSON.parse(text); } catch (e) { return; }
    if (!ev.seq) return; // the server's keepalive
    if (ev.seq > state.lastSeq + 1) await catchUp();
    onEvent(ev);
  };
  ws.onclose = () => { $("conn").className = "down"; $("conn").title = "reconnecting"; setTimeout(connect, 1000); };
}

refreshHealth();
route().then(catchUp);
connect();
// Polling backs up the socket: a monitor must show the truth even when
// every live message is lost.
setInterval(() => { catchUp(); refreshHealth(); }, 5000);
