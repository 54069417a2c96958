// Load on the owner portal's API: sign-ins (each one argon2id verification)
// and dashboard reads with a session, from CONCURRENCY clients for SECONDS
// each. Prints one JSON line per phase. Used by scripts/bench-portal.
const base = process.env.ANCHOR_BASE_URL;
const concurrency = Number(process.env.CONCURRENCY || 16);
const seconds = Number(process.env.SECONDS_PER_PHASE || 10);

async function post(path, body, cookie) {
  const headers = { "Content-Type": "application/json" };
  if (cookie) headers.Cookie = cookie;
  return fetch(base + path, { method: "POST", headers, body: JSON.stringify(body) });
}

async function phase(name, request) {
  const latencies = [];
  let failures = 0;
  const end = Date.now() + seconds * 1000;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (Date.now() < end) {
      const started = performance.now();
      const response = await request();
      await response.arrayBuffer();
      if (!response.ok) failures++;
      latencies.push(performance.now() - started);
    }
  }));
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))].toFixed(1);
  console.log(JSON.stringify({ phase: name, concurrency, requests: latencies.length, failures, per_second: Math.round(latencies.length / seconds), p50_ms: at(0.5), p99_ms: at(0.99) }));
}

const email = `load-${Date.now()}@example.com`;
const password = "a long passphrase 7";
await post("/dap/register", { email, password, terms_agreed: true, privacy_agreed: true });
const login = await post("/dap/login", { email, password });
const cookie = login.headers.get("set-cookie").split(";")[0];
// Five linked agents with a few declarations each, so the dashboard has work.
for (let i = 0; i < 5; i++) {
  const agent = await (await post("/v1/agent/register", {})).json();
  const linked = await (await post("/dap/agent/link", { agent_id: agent.agent_id, auth_token: agent.auth_token }, cookie)).json();
  for (let j = 0; j < 5; j++) {
    await fetch(base + "/v1/dd/create", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${linked.new_auth_token}` },
      body: JSON.stringify({
        request_id: crypto.randomUUID(),
        dd: { dd_unit_type: "single", dd_declaration_mode: "self_declared", decision_type: "internal_service", decision_action_type: "execute", origin_context_type: "internal", selection_state: "SELECTED" },
        ee: { ee_preset: "EE_basic" },
      }),
    });
  }
}
await phase("login", () => post("/dap/login", { email, password }));
await phase("dashboard", () => fetch(base + "/dap/dashboard", { headers: { Cookie: cookie } }));
await phase("usage_daily", () => fetch(base + "/dap/usage/daily?days=30", { headers: { Cookie: cookie } }));
