// txbox admin dashboard. Plain JavaScript, no build step, no third-party
// code: the page works offline and under a CSP that allows only this
// file. Every value from the server goes into the page as text
// (textContent), never as markup.
"use strict";

const POLL_MS = 2000;
const HISTORY = 90;
const COLORS = ["#3b6fd8", "#d8553b", "#2f9e5b", "#9b4fd1", "#c79a1a", "#1a9bb0", "#b03a7a", "#6b7a2f"];
const SVG_NS = "http://www.w3.org/2000/svg";

const state = { history: {}, last: null, colors: {}, cursor: "", filter: null, preview: null, audit: { cursor: "", action: "", paged: false } };

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function fmtNum(n) { return n == null ? "–" : Number(n).toLocaleString("en-US"); }
function fmtDur(s) {
  if (s == null) return "–";
  if (s === 0) return "0s";
  if (s < 1) return Math.round(s * 1000) + "ms";
  if (s < 120) return s.toFixed(1) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  return Math.round(s / 3600) + "h";
}
function fmtTime(t) { return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "–"; }

// A relay with tenants (docs/operations.md, "Tenants") serves every API
// route under api/v1/tenants/NAME/: state.tenant is the tenant the page
// shows, "" on a relay without tenants.
function apiPath(path) {
  return state.tenant ? path.replace(/^api\/v1\//, "api/v1/tenants/" + encodeURIComponent(state.tenant) + "/") : path;
}

// api calls the API for the tenant shown; an answer that arrives after
// another tenant was picked is an error with stale set, which the callers
// drop (the new tenant's answer is on its way).
async function api(path, opts) {
  const tenant = state.tenant;
  const body = await apiAt(apiPath(path), opts);
  if (tenant !== state.tenant) throw Object.assign(new Error("another tenant was picked"), { stale: true });
  return body;
}

// apiAt calls the API at path as it is (the tenants' route takes no tenant).
async function apiAt(path, opts) {
  const res = await fetch(path, Object.assign({ credentials: "same-origin", headers: { "Accept": "application/json" } }, opts || {}));
  if (res.status === 401) { window.location.reload(); throw new Error("signed out"); }
  const body = res.headers.get("Content-Type") && res.headers.get("Content-Type").includes("json") ? await res.json() : null;
  if (!res.ok) {
    const detail = body ? (body.detail || body.title) + (body.errors ? ": " + body.errors.map(e => e.param + " " + e.detail).join("; ") : "") : res.statusText;
    throw new Error(detail);
  }
  return body;
}

function color(t) {
  if (!state.colors[t]) state.colors[t] = COLORS[Object.keys(state.colors).length % COLORS.length];
  return state.colors[t];
}

function record(ov) {
  const now = Date.parse(ov.time);
  for (const t of ov.types) {
    const h = state.history[t.event_type] || (state.history[t.event_type] = []);
    const prev = h[h.length - 1];
    let rate = 0;
    if (prev && t.sent_total != null && prev.sent != null && now > prev.at) rate = Math.max(0, (t.sent_total - prev.sent) * 1000 / (now - prev.at));
    h.push({ at: now, due: t.due, lag: t.oldest_due_age_seconds, sent: t.sent_total, rate: rate, delay: t.polling ? t.polling.delay_seconds : null });
    if (h.length > HISTORY) h.shift();
    t._rate = rate;
  }
}

function chart(svg, field) {
  while (svg.firstChild) svg.firstChild.remove();
  const W = 400, H = 140, L = 34, B = 14;
  let max = 0;
  for (const h of Object.values(state.history)) for (const p of h) if (p[field] != null) max = Math.max(max, p[field]);
  if (max === 0) max = 1;
  const axis = document.createElementNS(SVG_NS, "line");
  for (const [k, v] of Object.entries({ x1: L, y1: H - B, x2: W, y2: H - B, class: "axis" })) axis.setAttribute(k, v);
  svg.append(axis);
  const label = document.createElementNS(SVG_NS, "text");
  label.setAttribute("x", 2); label.setAttribute("y", 10);
  label.textContent = max >= 100 ? Math.round(max).toString() : max.toPrecision(2);
  svg.append(label);
  const zero = document.createElementNS(SVG_NS, "text");
  zero.setAttribute("x", 2); zero.setAttribute("y", H - B);
  zero.textContent = "0";
  svg.append(zero);
  for (const [t, h] of Object.entries(state.history)) {
    const pts = [];
    h.forEach((p, i) => {
      if (p[field] == null) return;
      const x = L + (W - L) * (HISTORY - h.length + i) / (HISTORY - 1);
      const y = (H - B) - (H - B - 4) * p[field] / max;
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    if (pts.length === 0) continue;
    const line = document.createElementNS(SVG_NS, "polyline");
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("stroke", color(t));
    line.setAttribute("data-type", t);
    svg.append(line);
  }
}

function attemptsBars(a) {
  const span = el("span", { class: "attempts", title: a.map((n, i) => (i === a.length - 1 ? i + "+" : i) + ": " + n).join(", ") });
  const max = Math.max(1, ...a);
  for (const n of a) { const i = el("i"); i.style.height = Math.max(1, Math.round(18 * n / max)) + "px"; span.append(i); }
  return span;
}

function fill(tbody, rows) {
  while (tbody.firstChild) tbody.firstChild.remove();
  for (const r of rows) tbody.append(r);
  if (rows.length === 0) tbody.append(el("tr", {}, el("td", { colSpan: 20, class: "empty" }, "none")));
}

function render(ov) {
  let due = 0, sched = 0, inproc = 0, lag = 0, rate = 0;
  for (const t of ov.types) { due += t.due; sched += t.scheduled; inproc += t.in_process; lag = Math.max(lag, t.oldest_due_age_seconds); rate += t._rate || 0; }
  $("#total-due").textContent = fmtNum(due);
  $("#total-scheduled").textContent = fmtNum(sched);
  $("#total-in-process").textContent = fmtNum(inproc);
  $("#max-lag").textContent = fmtDur(lag);
  $("#total-rate").textContent = rate.toFixed(1);
  $("#dl-unresolved").textContent = fmtNum(ov.dead_letters.unresolved);
  $("#parked-count").textContent = fmtNum(ov.parked_keys);
  $("#updated").textContent = fmtTime(ov.time);
  const rs = $("#relay-state");
  if (ov.relay) { rs.textContent = ov.relay.running ? (ov.relay.degraded ? "degraded" : "running") : "stopped"; rs.className = "badge " + (ov.relay.running ? (ov.relay.degraded ? "warn" : "ok") : "bad"); }
  else { rs.textContent = "no relay in this process"; rs.className = "badge"; }

  fill($("#types tbody"), ov.types.flatMap(t => [el("tr", { "data-type": t.event_type },
    el("td", {}, t.event_type),
    el("td", { class: "num due" }, fmtNum(t.due)),
    el("td", { class: "num scheduled" }, fmtNum(t.scheduled)),
    el("td", { class: "num in-process" }, fmtNum(t.in_process)),
    el("td", { class: "num failed" }, fmtNum(t.failed)),
    el("td", { class: "num lag" }, fmtDur(t.oldest_due_age_seconds)),
    el("td", { class: "num" }, t.next_due_in_seconds ? "in " + fmtDur(t.next_due_in_seconds) : "–"),
    el("td", { class: "num sent" }, fmtNum(t.sent_total)),
    el("td", { class: "num delay" }, t.polling ? fmtDur(t.polling.delay_seconds) : "–"),
    el("td", {}, t.polling ? t.polling.sender + (t.polling.destination ? " → " + t.polling.destination : "") : "–"),
    el("td", { class: "circuit state-" + (t.polling ? t.polling.circuit : "") }, t.polling ? t.polling.circuit : "–"),
    el("td", {}, attemptsBars(t.attempts)),
    el("td", { class: "err" }, t.last_error || (t.polling && t.polling.poll_error) || ""))].concat(routeRows(t))));

  fill($("#circuits tbody"), ov.circuits.map(c => el("tr", {},
    el("td", {}, c.sender), el("td", {}, c.connection ? "(connection)" : c.destination),
    el("td", { class: "state-" + c.state }, c.state), el("td", { class: "err" }, c.last_error || ""))));
  fill($("#instances tbody"), ov.instances.map(i => el("tr", {},
    el("td", {}, i.id), el("td", {}, fmtDur(i.seen_ago_seconds) + " ago"),
    el("td", { class: i.expired ? "state-open" : "state-closed" }, i.expired ? "expired" : "alive"), el("td", {}, i.info))));

  // The oldest xid-holding transaction: events of ordered types published
  // after it began wait until it ends (docs/concepts.md, "Ordering").
  const fh = ov.horizon_holder;
  const horizon = $("#horizon-holder");
  horizon.textContent = !ov.horizon_watched ? "not watched: no event type waits for it (ordering: key)"
    : fh ? "held by " + fh.name + ", transaction id " + fh.xid + ", open " + fmtDur(fh.age_seconds) : "not held";
  horizon.className = fh && fh.age_seconds >= 60 ? "err" : "";

  // WAL mode: the stream and its slot (docs/operations.md, "WAL mode").
  const sv = ov.stream;
  $("#stream-section").hidden = !sv;
  if (sv) {
    const sl = sv.slot;
    const mb = b => (b / 1048576).toFixed(1) + " MiB";
    let txt = sv.state + (sv.last_error ? " (" + sv.last_error + ")" : "");
    if (sv.last_confirm_age_seconds != null) txt += ", last confirm " + fmtDur(sv.last_confirm_age_seconds) + " ago";
    txt += ", holding " + fmtNum(sv.held_events) + " events, spilled " + fmtNum(sv.spilled_events);
    if (sv.pauses) txt += ", paused past its limit " + fmtNum(sv.pauses) + " times";
    if (sl) txt += "; slot " + sl.slot + " " + sl.wal_status + ", keeps " + mb(sl.restart_lag_bytes) + " of WAL, unconfirmed " + mb(sl.flush_lag_bytes) +
      ", safe WAL " + (sl.safe_wal_size_bytes < 0 ? "unbounded" : mb(sl.safe_wal_size_bytes)) + ", decoder spill " + mb(sl.spill_bytes);
    if (sv.slot_error) txt += "; cannot read the slot: " + sv.slot_error;
    const se = $("#stream-state");
    se.textContent = txt;
    se.className = sv.lagging || sv.state === "failing" || (sl && (sl.wal_status === "lost" || sl.wal_status === "unreserved")) ? "err" : "";
    // Whether the slot survives a failover (docs/operations.md, "Failover"):
    // every problem, and what could not be looked at.
    const fo = sl && sl.failover;
    const fe = $("#stream-failover");
    let ft = "failover: not read yet";
    if (fo && fo.verdict) {
      const label = { safe: "safe", unsafe: "NOT SAFE", unknown: "unknown", no_standby: "no standby" }[fo.verdict] || fo.verdict;
      ft = "failover: " + label + " — " + fo.note;
      const more = (fo.problems || []).slice(1).concat((fo.unchecked || []).map(u => "not checked: " + u));
      if (more.length) ft += "; " + more.join("; ");
    }
    fe.textContent = ft;
    fe.className = fo && fo.verdict === "unsafe" ? "err" : "";
  }

  const legend = $("#legend");
  while (legend.firstChild) legend.firstChild.remove();
  for (const t of ov.types) { const s = el("span", {}, t.event_type); s.style.setProperty("--c", color(t.event_type)); legend.append(s); }
  chart($("#chart-backlog"), "due");
  chart($("#chart-lag"), "lag");
  chart($("#chart-throughput"), "rate");
  chart($("#chart-delay"), "delay");
}

async function loadParked() {
  const res = await api("api/v1/parked-keys");
  fill($("#parked tbody"), res.parked_keys.map(p => el("tr", {},
    el("td", {}, p.event_type), el("td", {}, p.key),
    el("td", {}, el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); showPreview(p.dead_letter_id, false); } }, p.dead_letter_id)),
    el("td", { class: "num" }, fmtNum(p.dead_letters)), el("td", { class: "num" }, fmtNum(p.waiting)),
    el("td", { class: "err" }, p.last_error))));
}

// refresh reads the overview and the parked keys of the tenant shown.
async function refresh() {
  try {
    const ov = await api("api/v1/overview");
    record(ov);
    render(ov);
    await loadParked();
  } catch (e) {
    if (!e.stale) {
      $("#relay-state").textContent = "error: " + e.message;
      $("#relay-state").className = "badge bad";
    }
  }
}

async function poll() {
  await refresh();
  setTimeout(poll, POLL_MS);
}

// Dead letters.

function filterFromForm() {
  const f = {};
  const form = new FormData($("#dl-filter"));
  for (const [k, v] of form.entries()) {
    if (!v) continue;
    f[k] = (k === "failed_after" || k === "failed_before") ? new Date(v).toISOString() : v;
  }
  return f;
}

// routeRows are a fanned-out type's routes, one row each under the
// type's: the type's counts are its rows of every route, each route has
// its own destination, poller and circuit.
function routeRows(t) {
  return (t.routes || []).map(r => {
    const p = r.polling;
    const settings = r.claim ? " (" + r.claim + ", max attempts " + r.max_attempts + (r.ordering === "key" ? ", ordered by key" : "") + ")" : "";
    return el("tr", { class: "route", "data-route-of": t.event_type, "data-route": r.name },
      el("td", { title: "route of " + t.event_type + settings }, "↳ " + r.name),
      el("td", { colSpan: 7 }, settings ? "route" + settings : "route"),
      el("td", { class: "num delay" }, p ? fmtDur(p.delay_seconds) : "–"),
      el("td", {}, (r.sender || (p && p.sender) || "") + (r.destination ? " → " + r.destination : "")),
      el("td", { class: "circuit state-" + (p ? p.circuit : "") }, p ? p.circuit : "–"),
      el("td", {}, ""),
      el("td", { class: "err" }, (p && p.poll_error) || ""));
  });
}

async function loadDeadLetters(append) {
  state.paged = append;
  const params = new URLSearchParams(state.filter || {});
  params.set("limit", "50");
  if (append && state.cursor) params.set("cursor", state.cursor);
  try {
    const page = await api("api/v1/dead-letters?" + params.toString());
    const rows = page.items.map(d => el("tr", { "data-id": d.id },
      el("td", {}, fmtTime(d.failed_at)), el("td", {}, d.event_type), el("td", {}, d.route || ""), el("td", {}, d.key || ""),
      el("td", { class: "num" }, d.attempts), el("td", {}, d.status), el("td", { class: "num" }, fmtNum(d.payload.size) + " B"),
      el("td", { class: "err" }, d.last_error),
      el("td", {},
        el("button", { type: "button", class: "preview-btn", onclick: () => showPreview(d.id, false) }, "Preview"), " ",
        el("button", { type: "button", class: "retry-btn", onclick: () => act("retry", { ids: [d.id] }, "Retry dead letter " + d.id + "?") }, "Retry"), " ",
        el("button", { type: "button", class: "resolve-btn", onclick: () => act("resolve", { ids: [d.id] }, "Resolve dead letter " + d.id + "?") }, "Resolve"), " ",
        el("button", { type: "button", class: "delete-btn danger", onclick: () => act("delete", { ids: [d.id] }, "Delete dead letter " + d.id + " for good?") }, "Delete"))));
    const tbody = $("#dead-letters tbody");
    if (append) for (const r of rows) tbody.append(r); else fill(tbody, rows);
    state.cursor = page.next_cursor || "";
    $("#dl-more").hidden = !state.cursor;
  } catch (e) {
    if (!e.stale) $("#dl-message").textContent = "Cannot list dead letters: " + e.message;
  }
}

async function showPreview(id, full) {
  try {
    const d = await api("api/v1/dead-letters/" + encodeURIComponent(id) + (full ? "?full=true" : ""));
    state.preview = id;
    $("#preview").hidden = false;
    $("#preview-id").textContent = d.id;
    const meta = $("#preview-meta");
    while (meta.firstChild) meta.firstChild.remove();
    const add = (k, v) => { meta.append(el("dt", {}, k), el("dd", {}, v)); };
    add("type", d.event_type); if (d.route) add("route", d.route); if (d.event_id) add("event id", d.event_id); add("key", d.key || "–"); add("status", d.status); add("attempts", d.attempts);
    add("failed at", fmtTime(d.failed_at)); add("last error", d.last_error);
    add("payload", fmtNum(d.payload.size) + " bytes, " + d.payload.content_type + (d.payload.encoding === "base64" ? " (binary, shown as base64)" : "") + (d.payload.truncated ? ", preview truncated" : ""));
    for (const [k, v] of Object.entries(d.headers || {})) add("header " + k, v);
    $("#preview-body").textContent = d.payload.preview || "";
    $("#preview-full").hidden = !d.payload.truncated;
    $("#preview-download").href = apiPath("api/v1/dead-letters/") + encodeURIComponent(d.id) + "/payload";
  } catch (e) {
    if (!e.stale) $("#dl-message").textContent = "Cannot show " + id + ": " + e.message;
  }
}

// Failure groups (docs/operations.md, "Failure groups").

async function loadGroups() {
  try {
    const page = await api("api/v1/dead-letters/groups?limit=50");
    $("#groups-incomplete").hidden = page.complete;
    fill($("#groups tbody"), page.groups.map(g => el("tr", { "data-group": g.fingerprint },
      el("td", { class: "num" }, fmtNum(g.count)),
      el("td", {}, fmtTime(g.last_failed_at)),
      el("td", {}, g.event_types.join(", ")),
      el("td", {}, g.class),
      el("td", {}, g.destinations.join(", ")),
      el("td", { class: "err", title: g.sample.error }, g.message),
      el("td", {}, el("pre", { class: "sample" }, g.sample.payload.preview || "")),
      el("td", {},
        el("button", { type: "button", class: "show-group-btn", onclick: () => showGroup(g.fingerprint) }, "Show"), " ",
        el("button", { type: "button", class: "retry-group-btn", onclick: () => actGroup("retry", g) }, "Retry"), " ",
        el("button", { type: "button", class: "resolve-group-btn", onclick: () => actGroup("resolve", g) }, "Resolve"), " ",
        el("button", { type: "button", class: "delete-group-btn danger", onclick: () => actGroup("delete", g) }, "Delete")))));
  } catch (e) {
    if (!e.stale) $("#groups-message").textContent = "Cannot list failure groups: " + e.message;
  }
}

function showGroup(fingerprint) {
  const form = $("#dl-filter");
  form.elements.group.value = fingerprint;
  state.filter = filterFromForm();
  loadDeadLetters(false);
}

function actGroup(action, g) {
  const rate = Number($("#group-rate").value) || 0;
  const sel = { filter: { group: g.fingerprint } };
  if (rate > 0) sel.rate = rate;
  return act(action, sel, action + " the " + fmtNum(g.count) + " dead letters of the group \u201c" + g.message + "\u201d?", $("#groups-message"));
}

function confirmDialog(text) {
  return new Promise(resolve => {
    const d = $("#confirm");
    $("#confirm-text").textContent = text;
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "";
    d.showModal();
  });
}

// act runs a dry run, asks, then the action; a filter or all that
// matches more than one request takes (or a throttled one) is continued
// from next_cursor until done, with the progress in msg.
async function act(action, selector, question, msg) {
  msg = msg || $("#dl-message");
  const post = body => api("api/v1/dead-letters/" + action, { method: "POST", headers: { "Content-Type": "application/json", "Accept": "application/json" }, body: JSON.stringify(body) });
  try {
    const dry = await post(Object.assign({}, selector, { dry_run: true }));
    if (dry.matched === 0) { msg.textContent = "Nothing matches."; return; }
    const ok = await confirmDialog(question + " (" + dry.changed + " of " + dry.matched + " selected dead letters would change" + (dry.more ? "; more match than one request takes" : "") + ")");
    if (!ok) { msg.textContent = "Cancelled."; return; }
    let changed = 0, matched = 0, body = selector;
    for (;;) {
      const res = await post(body);
      changed += res.changed; matched += res.matched;
      msg.textContent = action + ": " + fmtNum(changed) + " of " + fmtNum(matched) + " changed" + (res.more ? ", going on…" : ".");
      if (!res.more || !res.next_cursor) break;
      body = Object.assign({}, selector, { cursor: res.next_cursor });
    }
    await loadDeadLetters(false);
    await loadGroups();
    if (!state.audit.paged) await loadAudit(false);
  } catch (e) {
    if (!e.stale) msg.textContent = action + " failed: " + e.message;
  }
}

// The audit trail: who did what to the dead letters, newest first. Who,
// filter and error are whatever the database holds (a CLI user name, an
// operator's filter text): text, like everything else.
async function loadAudit(append) {
  state.audit.paged = append;
  const params = new URLSearchParams({ limit: "50" });
  if (state.audit.action) params.set("action", state.audit.action);
  if (append && state.audit.cursor) params.set("cursor", state.audit.cursor);
  try {
    const page = await api("api/v1/audit?" + params.toString());
    const rows = page.entries.map(a => el("tr", { "data-id": String(a.id), "data-action": a.action, "data-dry-run": String(a.dry_run) },
      el("td", {}, fmtTime(a.at)), el("td", { class: "who" }, a.who), el("td", { class: "action" }, a.action),
      el("td", {}, a.dry_run ? "dry run" : ""), el("td", {}, a.selector), el("td", { class: "filter" }, a.filter),
      el("td", { class: "num matched" }, fmtNum(a.matched)), el("td", { class: "num changed" }, fmtNum(a.changed)),
      el("td", { class: "err" }, a.error || "")));
    const tbody = $("#audit tbody");
    if (append) for (const r of rows) tbody.append(r); else fill(tbody, rows);
    state.audit.cursor = page.next_cursor || "";
    $("#audit-more").hidden = !state.audit.cursor;
    $("#audit-message").textContent = "";
  } catch (e) {
    if (!e.stale) $("#audit-message").textContent = "Cannot list the audit trail: " + e.message;
  }
}

// Tenants: the first TENANT_PAGE of them, in the table and the picker.
const TENANT_PAGE = 500;

// loadTenants reads the tenants; false on a relay without tenants.
async function loadTenants() {
  const page = await apiAt("api/v1/tenants?limit=" + TENANT_PAGE);
  if (!page.served) return false;
  const picker = $("#tenant-picker");
  const names = page.tenants.map(t => t.name);
  if (picker.options.length !== names.length || names.some((n, i) => picker.options[i].value !== n)) {
    picker.replaceChildren(...page.tenants.map(t => el("option", { value: t.name }, t.name)));
  }
  if (!state.tenant || !names.includes(state.tenant)) {
    const want = decodeURIComponent((window.location.hash.match(/tenant=([^&]*)/) || [])[1] || "");
    const running = page.tenants.find(t => t.running);
    state.tenant = names.includes(want) ? want : (running || page.tenants[0] || { name: "" }).name;
  }
  picker.value = state.tenant;
  fill($("#tenants tbody"), page.tenants.map(t => el("tr", { "data-tenant": t.name, class: t.name === state.tenant ? "selected" : "" },
    el("td", {}, el("a", { href: "#tenant=" + encodeURIComponent(t.name), onclick: (ev) => { ev.preventDefault(); pickTenant(t.name); } }, t.name)),
    el("td", { class: t.running ? "ok" : "bad" }, t.state),
    el("td", { class: "num" }, fmtNum(t.due)), el("td", { class: "num" }, fmtNum(t.scheduled)),
    el("td", { class: "num" }, fmtNum(t.in_process)), el("td", { class: "num" }, fmtNum(t.failed)),
    el("td", { class: "num" }, fmtDur(t.oldest_due_age_seconds)), el("td", { class: "num" }, fmtNum(t.dead_letters)),
    el("td", { class: "err" }, t.error || t.counts_error || ""))));
  $("#tenants-note").textContent = (page.next_cursor ? "the first " + TENANT_PAGE + " tenants are shown; " : "") +
    (page.list_error ? "listing the tenants failed: " + page.list_error : "");
  $("#tenants-section").hidden = false;
  return true;
}

// pickTenant shows the tenant named name.
function pickTenant(name) {
  if (name === state.tenant) return;
  state.tenant = name;
  window.location.hash = "tenant=" + encodeURIComponent(name);
  Object.assign(state, { history: {}, colors: {}, cursor: "", paged: false, preview: null });
  state.audit.cursor = ""; state.audit.paged = false;
  for (const r of document.querySelectorAll("#tenants tbody tr")) r.className = r.dataset.tenant === name ? "selected" : "";
  $("#tenant-picker").value = name;
  fill($("#parked tbody"), []);
  refresh();
  loadDeadLetters(false);
  loadGroups();
  loadAudit(false);
}

document.addEventListener("DOMContentLoaded", async () => {
  state.tenant = "";
  try {
    if (await loadTenants()) {
      $("#tenant-picker").addEventListener("change", ev => pickTenant(ev.target.value));
      setInterval(() => loadTenants().catch(() => {}), 5000);
    }
  } catch (e) {
    $("#relay-state").textContent = "error: " + e.message;
  }
  $("#dl-filter").addEventListener("submit", ev => { ev.preventDefault(); state.filter = filterFromForm(); loadDeadLetters(false); });
  for (const b of document.querySelectorAll("[data-bulk]")) {
    b.addEventListener("click", () => {
      const f = filterFromForm();
      const sel = Object.keys(f).length ? { filter: f } : { all: true };
      act(b.dataset.bulk, sel, b.dataset.bulk + " every dead letter matching the filter?");
    });
  }
  $("#dl-more").addEventListener("click", () => loadDeadLetters(true));
  $("#groups-refresh").addEventListener("click", () => loadGroups());
  loadGroups();
  $("#preview-full").addEventListener("click", () => showPreview(state.preview, true));
  $("#audit-filter").addEventListener("submit", ev => {
    ev.preventDefault();
    state.audit.action = new FormData($("#audit-filter")).get("action").trim();
    loadAudit(false);
  });
  $("#audit-more").addEventListener("click", () => loadAudit(true));
  state.filter = filterFromForm();
  loadDeadLetters(false);
  loadAudit(false);
  // Refresh the first page while nobody is paging through older ones.
  setInterval(() => { if (!state.paged) loadDeadLetters(false); if (!state.audit.paged) loadAudit(false); }, 5000);
  poll();
});
