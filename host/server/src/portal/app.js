// The owner portal: a small page over the /dap API. No framework and no
// external resources; every value from the server is inserted as text.
"use strict";

// `latest` numbers the loads of each view, so that a slower, older answer
// never draws over a newer one.
const state = { csrf: null, agents: [], latest: { ara: 0, dur: 0, market: 0, subs: 0 } };
const $ = (selector) => document.querySelector(selector);

function notice(text, isError) {
  const el = $("#notice");
  el.textContent = text || "";
  el.className = isError ? "error" : "";
}

// Calls the API with the session cookie; state-changing calls carry the CSRF token.
async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.csrf) headers["X-CSRF-Token"] = state.csrf;
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!response.ok) {
    const error = new Error((json && json.message) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    error.code = json && json.error_code;
    throw error;
  }
  return json;
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  row.appendChild(td);
  return td;
}

function shortDate(iso) {
  return iso ? iso.replace("T", " ").slice(0, 16) : "";
}

// An agent as a person reads it in a list: the start of its id, when it
// registered, its region; the value behind it stays the whole id.
function agentLabel(agent) {
  return [`${agent.agent_id.slice(0, 8)}…`, ...agentFacts(agent)].join(" · ");
}

function agentFacts(agent) {
  const facts = [`registered ${agent.registered_at.slice(0, 10)}`];
  if (agent.region_code) facts.push(agent.region_code);
  if (agent.auth_status && agent.auth_status !== "active") facts.push(agent.auth_status);
  return facts;
}

// The width a chart is drawn at: its box's width in CSS pixels, so that one
// unit of the drawing is one pixel and its labels keep their CSS size.
function chartWidth(el, fallback) {
  return Math.max(280, Math.floor(el.clientWidth || fallback));
}

// Every chart drawn, by container, to draw again at the new width when the
// window changes size.
const drawn = new Map();
function draw(selector, paint) {
  drawn.set(selector, paint);
  paint();
}
let resizing = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => { for (const paint of drawn.values()) paint(); }, 150);
});

function show(signedIn) {
  $("#signed-in").hidden = !signedIn;
  $("#signed-out").hidden = signedIn;
  $("#who").hidden = !signedIn;
}

// The pricing generation in force and the next one scheduled (public: shown
// signed in or out).
async function loadPricing() {
  const current = await api("GET", "/v1/pricing/current");
  let text = `Prices: generation ${current.pricing_version}, in force since ${shortDate(current.effective_from)}.`;
  if (current.next) text += ` Next: ${current.next.pricing_version} from ${shortDate(current.next.effective_from)} UTC.`;
  $("#pricing").textContent = text;
}

async function start() {
  loadPricing().catch((error) => notice(error.message, true));
  try {
    const me = await api("GET", "/dap/account/me");
    await enter(me);
  } catch (error) {
    if (error.status !== 401) notice(error.message, true);
    show(false);
  }
}

async function enter(me) {
  state.csrf = me.csrf_token;
  $("#who-email").textContent = me.email || `agent owner ${me.owner_id}`;
  $("#policy-form").elements.content_inclusion_policy.value = me.content_inclusion_policy;
  show(true);
  await refresh();
}

async function refresh() {
  // The agents first: whether any is linked decides which views show, and a
  // chart is drawn at the width of a view that shows.
  await loadAgents();
  await Promise.all([loadUsage(), loadClassifications(), loadPolicy()]);
  await loadRecent();
  await loadDab();
  await Promise.all([loadAra(), loadDur(), loadMarket(), loadSubscriptions()]);
}

async function loadAgents() {
  const [list, dashboard] = await Promise.all([api("GET", "/dap/agents"), api("GET", "/dap/dashboard")]);
  state.agents = list.agents;
  const counts = new Map(dashboard.agents.map((a) => [a.agent_id, a]));
  const body = $("#agents-table tbody");
  body.replaceChildren();
  for (const agent of list.agents) {
    const row = document.createElement("tr");
    row.dataset.agentId = agent.agent_id;
    const who = cell(row, "");
    who.className = "agent-id";
    const id = document.createElement("code");
    id.textContent = agent.agent_id;
    const facts = document.createElement("small");
    facts.textContent = agentFacts(agent).join(" · ");
    who.append(id, facts);
    cell(row, shortDate(agent.linked_at));
    cell(row, agent.trial_dac_remaining);
    cell(row, `${agent.budget_limit_dac}${agent.limit_source === "owner" ? "" : " (default)"}`).className = "dab";
    const c = counts.get(agent.agent_id) || { dd_count: 0, dac_total: 0 };
    cell(row, c.dd_count);
    cell(row, c.dac_total);
    body.appendChild(row);
  }
  $("#agents-empty").hidden = list.agents.length > 0;
  $("#agents-table").closest(".table-wrap").hidden = list.agents.length === 0;
  for (const view of document.querySelectorAll(".needs-agent")) view.hidden = list.agents.length === 0;
  for (const select of document.querySelectorAll(".agent-select")) {
    const previous = select.value;
    select.replaceChildren();
    for (const agent of list.agents) {
      const option = document.createElement("option");
      option.value = agent.agent_id;
      option.textContent = agentLabel(agent);
      select.appendChild(option);
    }
    if (previous) select.value = previous;
  }
  const dur = $("#dur-agent");
  const chosen = dur.value;
  const all = document.createElement("option");
  all.value = "";
  all.textContent = "All agents";
  dur.replaceChildren(all);
  for (const agent of list.agents) {
    const option = document.createElement("option");
    option.value = agent.agent_id;
    option.textContent = agentLabel(agent);
    dur.appendChild(option);
  }
  dur.value = list.agents.some((a) => a.agent_id === chosen) ? chosen : "";
}

// A bar per day: the height is that day's DAC on record.
async function loadUsage() {
  const usage = await api("GET", "/dap/usage/daily?days=30");
  draw("#usage-chart", () => drawUsage(usage));
  $("#usage-total").textContent = `${usage.total_dac} DAC on record in the last 30 days`;
}

function drawUsage(usage) {
  const ns = "http://www.w3.org/2000/svg";
  const container = $("#usage-chart");
  const width = chartWidth(container, 600), height = 180, left = 40, bottom = 20;
  const max = Math.max(1, ...usage.days.map((d) => d.dac_total));
  const step = (width - left) / usage.days.length;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const axis = document.createElementNS(ns, "line");
  for (const [k, v] of Object.entries({ x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: "axis" })) axis.setAttribute(k, v);
  svg.appendChild(axis);
  const label = (x, y, text) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x);
    t.setAttribute("y", y);
    t.textContent = text;
    svg.appendChild(t);
  };
  label(2, 12, String(max));
  label(2, height - bottom, "0");
  usage.days.forEach((day, i) => {
    const h = ((height - bottom - 16) * day.dac_total) / max;
    const bar = document.createElementNS(ns, "rect");
    bar.setAttribute("class", "bar");
    bar.setAttribute("x", left + i * step + 1);
    bar.setAttribute("y", height - bottom - h);
    bar.setAttribute("width", Math.max(1, step - 2));
    bar.setAttribute("height", h);
    bar.dataset.date = day.date;
    bar.dataset.dac = day.dac_total;
    const title = document.createElementNS(ns, "title");
    title.textContent = `${day.date}: ${day.dac_total} DAC, ${day.dd_count} DD`;
    bar.appendChild(title);
    svg.appendChild(bar);
    if (i % (width < 450 ? 10 : 7) === 0) label(left + i * step, height - 6, day.date.slice(5));
  });
  container.replaceChildren(svg);
}

const SVG = "http://www.w3.org/2000/svg";

// An SVG element with attributes, appended to `parent` when given.
function svg(name, attributes, parent) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes || {})) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function svgText(parent, x, y, text, className) {
  const t = svg("text", { x, y, class: className || "" }, parent);
  t.textContent = text;
  return t;
}

function tooltip(el, text) {
  svg("title", {}, el).textContent = text;
  return el;
}

const ACTIONS = ["execute", "approve", "hold", "depend", "reject"];
const EE_AXES = ["retention", "preset", "integrity", "disclosure", "responsibility", "content_scope", "delegation", "access_class"];

// One stacked bar per period: its declarations, split by action type where
// the resolution has them.
function drawTimeline(timeline) {
  const width = chartWidth($("#ara-timeline"), 600), height = 180, left = 40, bottom = 20;
  const items = timeline.items;
  const max = Math.max(1, ...items.map((item) => item.dd_count));
  const step = (width - left) / Math.max(1, items.length);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, "data-granularity": timeline.granularity });
  svg("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, class: "axis" }, root);
  svgText(root, 2, 12, String(max));
  svgText(root, 2, height - bottom, "0");
  const seen = new Set();
  const every = Math.ceil(items.length / Math.max(2, Math.floor(width / 100)));
  items.forEach((item, i) => {
    const x = left + i * step + 1;
    const period = svg("g", { class: "period", "data-start": item.period_start, "data-dd": item.dd_count }, root);
    tooltip(period, `${item.period_start}: ${item.dd_count} DD`);
    const parts = item.action_type_distribution ? Object.entries(item.action_type_distribution) : [["all", item.dd_count]];
    let y = height - bottom;
    for (const [action, n] of parts) {
      if (n <= 0) continue;
      const h = ((height - bottom - 16) * n) / max;
      y -= h;
      const kind = action === "all" || ACTIONS.includes(action) ? action : "other";
      tooltip(svg("rect", { class: `seg seg-${kind}`, x, y, width: Math.max(1, step - 2), height: h, "data-action": action, "data-n": n }, period),
        `${item.period_start}: ${n} ${action}`);
      seen.add(kind);
    }
    if (i % every === 0) svgText(root, x, height - 6, timeline.granularity === "month" ? item.period_start.slice(0, 7) : item.period_start.slice(5));
  });
  $("#ara-timeline").replaceChildren(root);
  const legend = $("#ara-legend");
  legend.replaceChildren();
  for (const kind of [...ACTIONS, "other", "all"].filter((k) => seen.has(k))) {
    const key = document.createElement("span");
    const swatch = svg("svg", { viewBox: "0 0 10 10" }, key);
    svg("rect", { class: `seg-${kind}`, width: 10, height: 10 }, swatch);
    key.appendChild(document.createTextNode(kind === "all" ? "declarations" : kind));
    legend.appendChild(key);
  }
}

// One 100% bar per EE axis, a segment per value.
function drawEe(pattern) {
  const width = chartWidth($("#ara-ee"), 600), row = 26, left = 110;
  const axes = EE_AXES.filter((axis) => pattern.distributions[axis] && Object.keys(pattern.distributions[axis]).length > 0);
  const root = svg("svg", { viewBox: `0 0 ${width} ${Math.max(row, axes.length * row)}`, width, height: Math.max(row, axes.length * row) });
  if (axes.length === 0) svgText(root, 0, 16, "No anchored declaration yet.");
  axes.forEach((axis, i) => {
    const values = Object.entries(pattern.distributions[axis]).sort((a, b) => b[1] - a[1]);
    const total = values.reduce((sum, [, n]) => sum + n, 0);
    const y = i * row + 3;
    svgText(root, 0, y + 14, axis);
    const bar = svg("g", { class: "ee-axis", "data-axis": axis, "data-total": total }, root);
    let x = left;
    values.forEach(([value, n], j) => {
      const w = ((width - left) * n) / total;
      tooltip(svg("rect", { class: `share-${Math.min(j, 5)}`, x, y, width: w, height: row - 6, "data-value": value, "data-n": n }, bar),
        `${axis} ${value}: ${n} (${Math.round((100 * n) / total)}%)`);
      if (w > 8 * (String(value).length + String(n).length + 1)) svgText(bar, x + 4, y + 14, `${value} ${n}`, "share-label");
      x += w;
    });
  });
  $("#ara-ee").replaceChildren(root);
}

async function loadAra() {
  const load = ++state.latest.ara;
  const agentId = $("#ara-agent").value;
  if (!agentId) {
    $("#ara-timeline").replaceChildren();
    $("#ara-ee").replaceChildren();
    $("#ara-legend").replaceChildren();
    return;
  }
  const level = $("#ara-level").value;
  const view = await api("GET", `/dap/agent/${encodeURIComponent(agentId)}/ara?resolution_level=${encodeURIComponent(level)}`);
  if (load !== state.latest.ara) return;
  draw("#ara-timeline", () => drawTimeline(view.timeline));
  draw("#ara-ee", () => drawEe(view.ee_pattern));
}

// Horizontal bars of DAC, one per [label, key, amount].
function drawAmounts(selector, rows) {
  const width = chartWidth($(selector), 400), row = 24, left = 130;
  const max = Math.max(0.001, ...rows.map(([, , dac]) => dac));
  const root = svg("svg", { viewBox: `0 0 ${width} ${rows.length * row}`, width, height: rows.length * row });
  rows.forEach(([label, key, dac], i) => {
    const y = i * row + 3;
    svgText(root, 0, y + 13, label);
    const w = ((width - left - 60) * dac) / max;
    tooltip(svg("rect", { class: "hbar", x: left, y, width: Math.max(dac > 0 ? 1 : 0, w), height: row - 8, "data-key": key, "data-dac": dac }, root),
      `${label}: ${dac} DAC`);
    svgText(root, left + w + 4, y + 13, `${dac}`, "value");
  });
  $(selector).replaceChildren(root);
}

async function loadDur() {
  const load = ++state.latest.dur;
  const agentId = $("#dur-agent").value;
  const query = agentId ? `?agent_id=${encodeURIComponent(agentId)}` : "";
  const report = await api("GET", `/dap/dur/summary${query}`);
  if (load !== state.latest.dur) return;
  const spend = report.dac_spend;
  draw("#dur-kinds", () => drawAmounts("#dur-kinds", [
    ["Declarations", "dd_ee", spend.dd_ee],
    ["Observation (ARA)", "ara", spend.ara],
    ["Sessions (ISE)", "ise", spend.ise],
    ["Simulation (sDAC)", "sdac", spend.sdac],
    ["Tools (TSL)", "tsl", spend.tsl],
    ["Snapshots (ASA)", "asa", spend.asa],
  ]));
  draw("#dur-sources", () => drawAmounts("#dur-sources", [
    ["Trial", "trial", spend.by_source.trial],
    ["External (x402)", "external", spend.by_source.external],
    ["Earned", "earned", spend.by_source.earned],
  ]));
  $("#dur-total").textContent =
    `${spend.total} DAC in ${spend.count} usage entries, ${report.period.from.slice(0, 10)} to ${report.period.to.slice(0, 10)}`;
  const link = $("#dur-csv");
  link.hidden = !agentId;
  $("#dur-csv-hint").hidden = Boolean(agentId);
  if (agentId) link.href = `/dap/dur/export?agent_id=${encodeURIComponent(agentId)}&format=csv`;
}

const EVENTS = {
  retention_charge: "Indefinite retention: the month is debited from Earned DAC",
  retention_demotion: "Indefinite retention ends: its records become short ones",
  asa_period_end: "ASA: the paid periods end (grace follows)",
  asa_grace_end: "ASA: the grace ends",
};

// One agent's subscriptions: retention and ASA, and what happens next.
async function loadSubscriptions() {
  const load = ++state.latest.subs;
  const agentId = $("#subs-agent").value;
  const view = agentId ? await api("GET", `/dap/agent/${encodeURIComponent(agentId)}/subscriptions`) : null;
  if (load !== state.latest.subs) return;
  const body = $("#subs-upcoming tbody");
  body.replaceChildren();
  const r = view && view.retention;
  $("#subs-retention").dataset.status = r ? r.status : "";
  $("#subs-retention").textContent = !view ? "" : !r ? "Indefinite retention is switched off on this service."
    : `Indefinite retention: ${r.status} (${r.monthly_dac} DAC a month); ${r.indefinite_dd_count} records kept indefinitely, ${r.demoted_dd_count} demoted.`;
  const a = view && view.asa;
  $("#subs-asa").dataset.status = a ? a.status : "none";
  $("#subs-asa").textContent = !view ? "" : !a ? "ASA: never subscribed."
    : `ASA: ${a.status}, ${a.days_remaining} days left of ${a.periods} period(s), paid until ${shortDate(a.expires_at)}.`;
  for (const next of view ? view.upcoming : []) {
    const row = document.createElement("tr");
    row.dataset.event = next.event;
    cell(row, shortDate(next.at));
    cell(row, EVENTS[next.event] || next.event);
    cell(row, next.dac === null ? "" : next.dac);
    cell(row, next.records === null ? "" : next.records);
    body.appendChild(row);
  }
  $("#subs-upcoming-empty").hidden = Boolean(view && view.upcoming.length);
}

// One agent's Earned DAC, tools and sales; the owner's human shares.
async function loadMarket() {
  const load = ++state.latest.market;
  const agentId = $("#market-agent").value;
  const shares = await api("GET", "/dap/tsl/human-shares");
  const view = agentId ? await api("GET", `/dap/agent/${encodeURIComponent(agentId)}/market`) : null;
  if (load !== state.latest.market) return;
  const tools = $("#market-tools tbody");
  const sales = $("#market-sales tbody");
  tools.replaceChildren();
  sales.replaceChildren();
  const choice = $("#human-share-form").elements.tool_id;
  choice.replaceChildren();
  if (view) {
    const e = view.earned;
    const next = e.next_expiry_dac === null ? "nothing left to expire" : `${e.next_expiry_dac} DAC expire on ${shortDate(e.next_expiry_at)}`;
    $("#market-earned").textContent =
      `Earned DAC: ${e.earned_balance} (${e.spendable ? "spendable" : `spendable from ${e.min_spend_threshold}`}); ${next}; ` +
      `received ${e.received_total}, spent ${e.spent_total}, expired ${e.expired_total}. Each credit lasts ${e.expiry_days} days.`;
    $("#market-earned").dataset.balance = e.earned_balance;
    for (const tool of view.tools) {
      const row = document.createElement("tr");
      row.dataset.toolId = tool.tool_id;
      cell(row, tool.tool_name);
      cell(row, tool.layer);
      cell(row, tool.price_dac);
      cell(row, tool.status);
      cell(row, tool.sales).className = "sales";
      cell(row, tool.earned_dac).className = "earned";
      cell(row, tool.component_version === null ? "none (listing only)" : `version ${tool.component_version}`).className = "component";
      tools.appendChild(row);
      const option = document.createElement("option");
      option.value = tool.tool_id;
      option.textContent = tool.tool_name;
      choice.appendChild(option);
    }
    for (const sale of view.recent_sales) {
      const row = document.createElement("tr");
      cell(row, shortDate(sale.sold_at));
      cell(row, sale.tool_name);
      cell(row, sale.price_dac);
      cell(row, sale.earned_dac);
      sales.appendChild(row);
    }
  } else {
    $("#market-earned").textContent = "";
  }
  $("#market-tools-empty").hidden = Boolean(view && view.tools.length);
  const body = $("#human-shares tbody");
  body.replaceChildren();
  for (const share of shares.human_shares) {
    const row = document.createElement("tr");
    row.dataset.toolId = share.tool_id;
    cell(row, share.tool_name);
    cell(row, share.agent_id).className = "agent-id";
    cell(row, share.human_share_rate);
    cell(row, share.in_force ? "in force" : `ended (${share.end_reason})`).className = "state";
    cell(row, share.sales);
    cell(row, share.accrued_dac).className = "accrued";
    body.appendChild(row);
  }
  $("#human-total").textContent = `${shares.accrued_total_dac} DAC accrued to you from human shares.`;
}

async function loadDab() {
  const agentId = $("#dab-form").elements.agent_id.value;
  if (!agentId) {
    $("#dab-status").textContent = "";
    return;
  }
  const dab = await api("GET", `/dap/dab/status?agent_id=${encodeURIComponent(agentId)}`);
  $("#dab-status").textContent =
    `Limit ${dab.budget_limit_dac} DAC per month (${dab.limit_source === "owner" ? "set by you" : "operator default"}), ` +
    `${dab.spent_dac} DAC spent externally this month.`;
}

// How far a record's receipt reaches: signed by the log, cosigned by the
// witnesses (named), time-stamped (when, and by which authority).
function proofText(proof) {
  if (!proof.in_log) return "not in the log yet";
  const parts = [proof.witnessed ? `witnessed by ${proof.cosigned_by.join(", ")}` : "signed by the log only"];
  if (proof.timestamped_at) {
    let by = proof.timestamped_by;
    try {
      by = new URL(proof.timestamped_by).host;
    } catch (_) {
      // not a URL: shown as it is
    }
    parts.push(`time-stamped ${shortDate(proof.timestamped_at)} by ${by}`);
  }
  const met = ["basic", "enhanced", "certifiable"];
  const short = met.indexOf(proof.integrity_reached) < met.indexOf(proof.integrity_declared);
  parts.push(short ? `${proof.integrity_reached} of ${proof.integrity_declared} declared` : proof.integrity_reached);
  return parts.join("; ");
}

async function loadRecent() {
  const agentId = $("#recent-agent").value;
  const body = $("#recent-table tbody");
  body.replaceChildren();
  if (!agentId) return;
  const report = await api("GET", `/dap/agent/${encodeURIComponent(agentId)}/report`);
  for (const dd of report.recent_dds) {
    const row = document.createElement("tr");
    cell(row, dd.dd_id);
    cell(row, shortDate(dd.anchored_at));
    cell(row, dd.decision_action_type);
    cell(row, dd.selection_state);
    cell(row, dd.dac_amount);
    cell(row, dd.settlement_statuses.join("+"));
    cell(row, proofText(dd.proof)).className = "proof";
    const receipt = cell(row, "");
    receipt.className = "receipt";
    if (dd.proof.in_log) {
      const link = document.createElement("a");
      link.href = `/dap/dd/${encodeURIComponent(dd.dd_id)}/receipt`;
      link.download = `receipt-${dd.dd_id}.json`;
      link.textContent = "Download";
      link.title = "The receipt, to check offline with anchor verify or to hand to an auditor";
      receipt.appendChild(link);
    }
    body.appendChild(row);
  }
}

async function loadClassifications() {
  const list = await api("GET", "/dap/classification");
  const body = $("#classification-table tbody");
  body.replaceChildren();
  for (const c of list.classifications) {
    const row = document.createElement("tr");
    row.dataset.key = c.classification_key;
    cell(row, c.classification_key);
    cell(row, c.classification_label);
    cell(row, c.description);
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = "Deactivate";
    button.addEventListener("click", () => guarded(async () => {
      await api("DELETE", `/dap/classification/${c.classification_id}`);
      notice(`Category ${c.classification_key} deactivated.`);
      await loadClassifications();
    }));
    cell(row, "").appendChild(button);
    body.appendChild(row);
  }
  $("#base-keys").textContent = "Operator categories, always available: " + list.base_classifications.map((c) => c.classification_key).join(", ");
}

async function loadPolicy() {
  const policy = await api("GET", "/dap/policy/content-inclusion");
  $("#policy-form").elements.content_inclusion_policy.value = policy.content_inclusion_policy;
  $("#policy-effect").textContent = policy.effect;
}

// Runs an action, reporting failure; a lost session returns to the sign-in page.
async function guarded(action) {
  try {
    await action();
  } catch (error) {
    if (error.status === 401 && state.csrf) {
      state.csrf = null;
      show(false);
      notice("Your session has ended. Sign in again.", true);
    } else {
      notice(error.message, true);
    }
  }
}

function on(selector, handler) {
  $(selector).addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(() => handler(event.target.elements, event.target));
  });
}

document.addEventListener("DOMContentLoaded", () => {
  on("#sign-in-form", async (f) => {
    const login = await api("POST", "/dap/login", { email: f.email.value, password: f.password.value });
    state.csrf = login.csrf_token;
    notice("Signed in.");
    await enter(await api("GET", "/dap/account/me"));
  });
  on("#sign-up-form", async (f) => {
    await api("POST", "/dap/register", {
      email: f.email.value,
      password: f.password.value,
      terms_agreed: f.terms.checked,
      privacy_agreed: f.privacy.checked,
      browser_language: navigator.language,
      timezone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    });
    const login = await api("POST", "/dap/login", { email: f.email.value, password: f.password.value });
    state.csrf = login.csrf_token;
    notice("Account created. You are signed in.");
    await enter(await api("GET", "/dap/account/me"));
  });
  on("#link-form", async (f, form) => {
    const linked = await api("POST", "/dap/agent/link", { agent_id: f.agent_id.value.trim(), auth_token: f.auth_token.value.trim() });
    $("#new-token-agent").textContent = linked.agent_id;
    $("#new-token-value").textContent = linked.new_auth_token;
    $("#new-token").hidden = false;
    form.reset();
    notice("Agent linked. Its previous token no longer works.");
    await refresh();
  });
  on("#dab-form", async (f) => {
    const dab = await api("PUT", "/dap/dab/set", {
      agent_id: f.agent_id.value,
      budget_limit_dac: Number(f.budget_limit_dac.value),
      budget_period: "monthly",
    });
    notice(`Budget set to ${dab.budget_limit_dac} DAC per month.`);
    // The table first, then the status line: once the status names the new
    // limit, the agents table already shows it.
    await loadAgents();
    await loadDab();
  });
  on("#policy-form", async (f) => {
    const policy = await api("PUT", "/dap/policy/content-inclusion", { content_inclusion_policy: f.content_inclusion_policy.value });
    $("#policy-effect").textContent = policy.effect;
    notice("Policy saved.");
  });
  on("#classification-form", async (f, form) => {
    const body = { classification_key: f.classification_key.value.trim(), classification_label: f.classification_label.value.trim() };
    if (f.description.value.trim()) body.description = f.description.value.trim();
    await api("POST", "/dap/classification", body);
    form.reset();
    notice(`Category ${body.classification_key} added.`);
    await loadClassifications();
  });
  $("#dab-form").elements.agent_id.addEventListener("change", () => guarded(loadDab));
  $("#recent-agent").addEventListener("change", () => guarded(loadRecent));
  $("#ara-agent").addEventListener("change", () => guarded(loadAra));
  $("#ara-level").addEventListener("change", () => guarded(loadAra));
  $("#dur-agent").addEventListener("change", () => guarded(loadDur));
  $("#market-agent").addEventListener("change", () => guarded(loadMarket));
  $("#subs-agent").addEventListener("change", () => guarded(loadSubscriptions));
  on("#human-share-form", async (f) => {
    const share = await api("POST", "/dap/tsl/human-share", { tool_id: f.tool_id.value, human_share_rate: Number(f.human_share_rate.value) });
    notice(`Human share of ${share.human_share_rate} set on ${share.tool_name}.`);
    await loadMarket();
  });
  $("#sign-out").addEventListener("click", () => guarded(async () => {
    await api("POST", "/dap/logout");
    state.csrf = null;
    show(false);
    notice("Signed out.");
  }));
  start();
});
