// The owner portal: a small page over the /dap API. No framework and no
// external resources; every value from the server is inserted as text.
"use strict";

const state = { csrf: null, agents: [] };
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

function show(signedIn) {
  $("#signed-in").hidden = !signedIn;
  $("#signed-out").hidden = signedIn;
  $("#who").hidden = !signedIn;
}

async function start() {
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
  await Promise.all([loadAgents(), loadUsage(), loadClassifications(), loadPolicy()]);
  await loadRecent();
  await loadDab();
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
    cell(row, agent.agent_id).className = "agent-id";
    cell(row, shortDate(agent.linked_at));
    cell(row, agent.trial_dac_remaining);
    cell(row, `${agent.budget_limit_dac}${agent.limit_source === "owner" ? "" : " (default)"}`).className = "dab";
    const c = counts.get(agent.agent_id) || { dd_count: 0, dac_total: 0 };
    cell(row, c.dd_count);
    cell(row, c.dac_total);
    body.appendChild(row);
  }
  $("#agents-empty").hidden = list.agents.length > 0;
  for (const select of document.querySelectorAll(".agent-select")) {
    const previous = select.value;
    select.replaceChildren();
    for (const agent of list.agents) {
      const option = document.createElement("option");
      option.value = agent.agent_id;
      option.textContent = agent.agent_id;
      select.appendChild(option);
    }
    if (previous) select.value = previous;
  }
}

// A bar per day: the height is that day's DAC on record.
async function loadUsage() {
  const usage = await api("GET", "/dap/usage/daily?days=30");
  const ns = "http://www.w3.org/2000/svg";
  const width = 600, height = 180, left = 36, bottom = 20;
  const max = Math.max(1, ...usage.days.map((d) => d.dac_total));
  const step = (width - left) / usage.days.length;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
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
    if (i % 7 === 0) label(left + i * step, height - 6, day.date.slice(5));
  });
  $("#usage-chart").replaceChildren(svg);
  $("#usage-total").textContent = `${usage.total_dac} DAC on record in the last 30 days`;
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
    await Promise.all([loadAgents(), loadDab()]);
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
  $("#sign-out").addEventListener("click", () => guarded(async () => {
    await api("POST", "/dap/logout");
    state.csrf = null;
    show(false);
    notice("Signed out.");
  }));
  start();
});
