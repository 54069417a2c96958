// The owner portal in a real browser: Debian's headless Chromium driven by
// playwright-core against a running `anchor` (ANCHOR_BASE_URL). Sign up, link
// an agent created over the API, set a DAB, add a classification, read the
// usage chart, the ARA and DUR charts and the CSV download, a receipt, the
// tool market (a seeded seller's Earned DAC, tool and sale; a human share),
// the same page at phone width (labels, overflow), sign out.
// Screenshots go to ANCHOR_ARTIFACTS; the facts the Rust side checks again go
// to <artifacts>/portal-result.json.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.ANCHOR_BASE_URL;
const artifacts = process.env.ANCHOR_ARTIFACTS || "artifacts";
const executablePath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

// Every chart label's size as drawn on screen: its CSS font size times the
// scale from the drawing's units to the pixels its SVG takes.
function labelSizes(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll("#usage-chart svg text, .chart svg text")]
      .filter((t) => t.getClientRects().length > 0)
      .map((t) => {
        const root = t.ownerSVGElement;
        const scale = root.getBoundingClientRect().width / root.viewBox.baseVal.width;
        return { text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scale };
      }),
  );
}

async function assertLabelsReadable(page, where) {
  const sizes = await labelSizes(page);
  assert.ok(sizes.length > 10, `${where}: chart labels drawn (${sizes.length})`);
  const small = sizes.filter((s) => s.px < 11.9);
  assert.deepEqual(small, [], `${where}: chart labels under 12 px`);
}

async function call(method, path, token, body) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: response.status, json: await response.json().catch(() => null) };
}

function declaration() {
  return {
    request_id: crypto.randomUUID(),
    dd: {
      dd_unit_type: "single",
      dd_declaration_mode: "self_declared",
      decision_type: "internal_service",
      decision_action_type: "execute",
      origin_context_type: "internal",
      selection_state: "SELECTED",
    },
    ee: {
      ee_retention_period: "short",
      ee_integrity_verification_level: "basic",
      ee_disclosure_format_policy: "internal",
      ee_responsibility_scope: "minimal",
    },
  };
}

test("an owner signs up, links an agent, sets its DAB, adds a category, sees usage and signs out", async () => {
  assert.ok(base, "ANCHOR_BASE_URL is not set");
  mkdirSync(artifacts, { recursive: true });
  const shot = (page, name) => page.screenshot({ path: join(artifacts, `portal-${name}.png`), fullPage: true });

  // An agent, created over the API, with two declarations on record.
  const registered = await call("POST", "/v1/agent/register", null, {});
  assert.equal(registered.status, 201);
  const agentId = registered.json.agent_id;
  const oldToken = registered.json.auth_token;
  let spent = 0;
  for (let i = 0; i < 2; i++) {
    const created = await call("POST", "/v1/dd/create", oldToken, declaration());
    assert.equal(created.status, 201, JSON.stringify(created.json));
    spent += created.json.dac_amount;
    const confirmed = await call("POST", "/v1/dd/confirm", oldToken, { dd_id: created.json.dd_id });
    assert.equal(confirmed.status, 200, JSON.stringify(confirmed.json));
  }

  const browser = await chromium.launch({
    executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const foreign = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("request", (request) => {
      if (!request.url().startsWith(base)) foreign.push(request.url());
    });
    const errors = [];
    page.on("pageerror", (error) => errors.push(String(error)));

    await page.goto(`${base}/portal/`);
    await page.locator("#signed-out").waitFor({ state: "visible" });
    await shot(page, "01-start");

    // Sign up (which signs in).
    const email = `owner-${Date.now()}@example.com`;
    const signUp = page.locator("#sign-up-form");
    await signUp.locator("input[name=email]").fill(email);
    await signUp.locator("input[name=password]").fill("a long passphrase 7");
    await signUp.locator("input[name=terms]").check();
    await signUp.locator("input[name=privacy]").check();
    await signUp.locator("button[type=submit]").click();
    await page.locator("#signed-in").waitFor({ state: "visible" });
    assert.equal(await page.locator("#who-email").textContent(), email);
    assert.equal(await page.locator("#agents-empty").isVisible(), true);
    // With no agent linked, no empty chart: a hint says where an agent's id and token come from.
    assert.match(await page.locator("#agents-empty").textContent(), /POST \/v1\/agent\/register/);
    const views = page.locator("section.needs-agent");
    assert.ok((await views.count()) >= 6);
    for (const view of await views.all()) assert.equal(await view.isVisible(), false);
    const emptyHeight = await page.evaluate(() => document.documentElement.scrollHeight);
    assert.ok(emptyHeight < 1600, `the empty dashboard is ${emptyHeight} px tall`);
    // The pricing generation in force, from /v1/pricing/current (none is scheduled here).
    const pricing = (await call("GET", "/v1/pricing/current")).json;
    await page.waitForFunction(() => document.querySelector("#pricing").textContent.length > 0);
    assert.equal(
      await page.locator("#pricing").textContent(),
      `Prices: generation ${pricing.pricing_version}, in force since ${pricing.effective_from.replace("T", " ").slice(0, 16)}.`,
    );
    await shot(page, "02-signed-up");

    // Link the agent: the page shows the replacement token, and the old one dies.
    await page.locator("#link-form input[name=agent_id]").fill(agentId);
    await page.locator("#link-form input[name=auth_token]").fill(oldToken);
    await page.locator("#link-form button[type=submit]").click();
    await page.locator("#new-token").waitFor({ state: "visible" });
    const newToken = (await page.locator("#new-token-value").textContent()).trim();
    assert.match(newToken, /^da_tk_[0-9a-f]{64}$/);
    assert.notEqual(newToken, oldToken);
    const row = page.locator(`#agents-table tr[data-agent-id="${agentId}"]`);
    await row.waitFor();
    // The agent reads as more than an id: the whole id, and when it registered.
    assert.equal(await row.locator("td.agent-id code").textContent(), agentId);
    assert.match(await row.locator("td.agent-id small").textContent(), /^registered \d{4}-\d{2}-\d{2}/);
    assert.match(await page.locator(`#ara-agent option[value="${agentId}"]`).textContent(), new RegExp(`^${agentId.slice(0, 8)}… · registered `));
    assert.equal((await call("GET", "/v1/trial/status", oldToken)).status, 401);
    assert.equal((await call("GET", "/v1/trial/status", newToken)).status, 200);
    await shot(page, "03-linked");

    // Set a DAB of 250 DAC.
    await page.locator("#dab-form select[name=agent_id]").selectOption(agentId);
    await page.locator("#dab-form input[name=budget_limit_dac]").fill("250");
    await page.locator("#dab-form button[type=submit]").click();
    await page.locator("#dab-status", { hasText: "Limit 250 DAC per month (set by you)" }).waitFor();
    assert.equal(await row.locator("td.dab").textContent(), "250");
    await shot(page, "04-dab");

    // Add a classification category.
    await page.locator("#classification-form input[name=classification_key]").fill("e2e_review");
    await page.locator("#classification-form input[name=classification_label]").fill("Reviewed in the browser test");
    await page.locator("#classification-form button[type=submit]").click();
    const category = page.locator('#classification-table tr[data-key="e2e_review"]');
    await category.waitFor();
    assert.match(await category.textContent(), /Reviewed in the browser test/);
    await shot(page, "05-classification");

    // The usage chart: 30 daily bars, today's carrying the agent's DAC. The
    // chart loaded at sign-up, before linking, so reload the page.
    await page.reload();
    await page.locator("#signed-in").waitFor({ state: "visible" });
    await page.locator("#usage-chart svg rect.bar").first().waitFor({ state: "attached" });
    const bars = await page.locator("#usage-chart svg rect.bar").evaluateAll((rects) =>
      rects.map((r) => ({ dac: Number(r.dataset.dac), height: Number(r.getAttribute("height")) })),
    );
    assert.equal(bars.length, 30);
    const filled = bars.filter((b) => b.dac > 0);
    assert.equal(filled.length, 1, JSON.stringify(bars));
    assert.equal(filled[0].dac, spent);
    assert.ok(filled[0].height > 0);
    assert.equal(await page.locator("#usage-total").textContent(), `${spent} DAC on record in the last 30 days`);
    // Recent decisions show the two declarations, metadata only.
    await page.locator("#recent-table tbody tr").nth(1).waitFor();
    assert.equal(await page.locator("#recent-table tbody tr").count(), 2);
    // Each says how far its proof reaches; this instance has no witnesses.
    const proofs = await page.locator("#recent-table tbody tr td.proof").allTextContents();
    for (const proof of proofs) assert.match(proof, /^(not in the log yet|signed by the log only; basic( of (enhanced|certifiable) declared)?)$/, proof);
    await shot(page, "06-usage-chart");

    // What ARA shows about the agent, once the service has folded its two
    // anchored declarations: a bar per day over 30 days, split by action type,
    // and a bar per EE axis.
    const folded = await page.evaluate(async (id) => {
      for (let i = 0; i < 300; i++) {
        const view = await (await fetch(`/dap/agent/${id}/ara?resolution_level=3`)).json();
        if (view.timeline.items.reduce((sum, item) => sum + item.dd_count, 0) === 2) return true;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return false;
    }, agentId);
    assert.ok(folded, "ARA folded the two declarations");
    // Both are in the log by now: each row offers its receipt, which the owner downloads.
    const logged = await page.evaluate(async (id) => {
      for (let i = 0; i < 300; i++) {
        const report = await (await fetch(`/dap/agent/${id}/report`)).json();
        if (report.recent_dds.length === 2 && report.recent_dds.every((dd) => dd.proof.in_log)) return true;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return false;
    }, agentId);
    assert.ok(logged, "both declarations reached the log");
    await page.locator("#recent-agent").dispatchEvent("change");
    await page.locator("#recent-table td.receipt a").nth(1).waitFor();
    const receiptHref = await page.locator("#recent-table td.receipt a").first().getAttribute("href");
    const receipt = await page.evaluate(async (url) => {
      const response = await fetch(url);
      return { status: response.status, disposition: response.headers.get("content-disposition"), json: await response.json() };
    }, receiptHref);
    assert.equal(receipt.status, 200);
    assert.match(receipt.disposition, /^attachment/);
    assert.equal(receiptHref, `/dap/dd/${receipt.json.dd_id}/receipt`);
    assert.equal(typeof receipt.json.leaf_index, "number", JSON.stringify(receipt.json).slice(0, 300));
    await page.locator("#ara-agent").selectOption(agentId);
    await page.locator("#ara-level").selectOption("3");
    // The chart drawn for the 30-day view (the default is 12 weeks).
    await page.locator('#ara-timeline svg[data-granularity="day"] rect.seg-execute[data-n="2"]').waitFor({ state: "attached" });
    const periods = await page.locator("#ara-timeline g.period").evaluateAll((gs) => gs.map((g) => Number(g.dataset.dd)));
    assert.equal(periods.length, 30);
    assert.deepEqual(periods.filter((n) => n > 0), [2], "today's bar holds both");
    assert.equal(await page.locator("#ara-legend").textContent(), "execute");
    const retention = page.locator('#ara-ee g.ee-axis[data-axis="retention"]');
    assert.equal(await retention.getAttribute("data-total"), "2");
    assert.equal(await retention.locator('rect[data-value="short"]').getAttribute("data-n"), "2");

    // DUR: spending by kind and by source, and the CSV of one agent's entries.
    await page.locator("#dur-agent").selectOption(agentId);
    await page.locator("#dur-csv").waitFor({ state: "visible" });
    const amount = (key) => page.locator(`#dur-kinds rect[data-key="${key}"], #dur-sources rect[data-key="${key}"]`).getAttribute("data-dac");
    assert.equal(Number(await amount("dd_ee")), spent);
    assert.equal(Number(await amount("trial")), spent);
    assert.equal(Number(await amount("ara")), 0);
    assert.equal(Number(await amount("external")), 0);
    assert.match(await page.locator("#dur-total").textContent(), new RegExp(`^${spent} DAC in 2 usage entries`));
    const href = await page.locator("#dur-csv").getAttribute("href");
    const csv = await page.evaluate(async (url) => {
      const response = await fetch(url);
      return { type: response.headers.get("content-type"), disposition: response.headers.get("content-disposition"), text: await response.text() };
    }, href);
    assert.match(csv.type, /^text\/csv/);
    assert.match(csv.disposition, /^attachment/);
    const lines = csv.text.trim().split("\n");
    assert.equal(lines[0], "recorded_at,type,cost_component,payment_source,amount_dac,subject_id");
    assert.equal(lines.length, 3, csv.text);
    assert.ok(lines.slice(1).every((line) => line.includes(",dd_ee,") && line.includes(",trial,")), csv.text);
    await shot(page, "07-ara-dur");

    // The tool market: a seller that sold one tool (seeded with the official
    // x402 client, ANCHOR_SELLER_*) is linked; its Earned DAC, tool and sale
    // show, and the owner takes a human share of the tool's sales.
    const sellerId = process.env.ANCHOR_SELLER_ID;
    const toolId = process.env.ANCHOR_TOOL_ID;
    assert.ok(sellerId && toolId && process.env.ANCHOR_SELLER_TOKEN, "the seeded sale is named");
    await page.locator("#link-form input[name=agent_id]").fill(sellerId);
    await page.locator("#link-form input[name=auth_token]").fill(process.env.ANCHOR_SELLER_TOKEN);
    await page.locator("#link-form button[type=submit]").click();
    await page.locator(`#agents-table tr[data-agent-id="${sellerId}"]`).waitFor();
    await page.locator("#market-agent").selectOption(sellerId);
    const tool = page.locator(`#market-tools tr[data-tool-id="${toolId}"]`);
    await tool.waitFor();
    assert.equal(await tool.locator("td.sales").textContent(), "1");
    assert.equal(await tool.locator("td.earned").textContent(), "20");
    // Its last column says which component buyers run (this seeded tool is a listing without one).
    assert.equal(await page.locator("#market-tools thead th").last().textContent(), "Component");
    assert.equal(await tool.locator("td.component").textContent(), "none (listing only)");
    assert.equal(await page.locator("#market-earned").getAttribute("data-balance"), "20");
    assert.match(await page.locator("#market-earned").textContent(), /20 DAC expire on /);
    assert.equal(await page.locator("#market-sales tbody tr").count(), 1);
    await page.locator("#human-share-form select[name=tool_id]").selectOption(toolId);
    await page.locator("#human-share-form input[name=human_share_rate]").fill("0.1");
    await page.locator("#human-share-form button[type=submit]").click();
    const share = page.locator(`#human-shares tr[data-tool-id="${toolId}"]`);
    await share.waitFor();
    assert.equal(await share.locator("td.state").textContent(), "in force");
    assert.equal(await share.locator("td.accrued").textContent(), "0");
    await shot(page, "07-market");

    // Its subscriptions: no indefinite retention, one ASA period (seeded), and what comes next.
    await page.locator("#subs-agent").selectOption(sellerId);
    await page.locator(`#subs-upcoming tr[data-event="asa_period_end"]`).waitFor();
    assert.equal(await page.locator("#subs-asa").getAttribute("data-status"), "active");
    assert.match(await page.locator("#subs-asa").textContent(), /90 days left of 1 period/);
    assert.equal(await page.locator("#subs-retention").getAttribute("data-status"), "none");
    assert.equal(await page.locator("#subs-upcoming tbody tr").count(), 2);
    await shot(page, "07-subscriptions");

    // Every chart label is at least 12 px on a desktop window and on a phone,
    // and at phone width (375 px) nothing is wider than the screen.
    await assertLabelsReadable(page, "1280 px");
    await page.setViewportSize({ width: 375, height: 800 });
    await page.waitForFunction(() => {
      const svg = document.querySelector("#usage-chart svg");
      return svg && Number(svg.getAttribute("width")) <= 375;
    });
    await assertLabelsReadable(page, "375 px");
    const overflow = await page.evaluate(() => ({
      page: document.documentElement.scrollWidth,
      // What reaches past the screen's right edge, for the failure message.
      past: [...document.querySelectorAll("body *")]
        .filter((el) => el.getClientRects().length > 0 && el.getBoundingClientRect().right > window.innerWidth + 0.5)
        .filter((el) => !el.closest(".table-wrap"))
        .slice(0, 8)
        .map((el) => `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${el.className && typeof el.className === "string" ? "." + el.className : ""} ${Math.round(el.getBoundingClientRect().right)}`),
    }));
    assert.ok(overflow.page <= 375 && overflow.past.length === 0, `wider than the phone: ${JSON.stringify(overflow)}`);
    await shot(page, "09-phone");
    await page.setViewportSize({ width: 1280, height: 900 });

    // The agent sees the DAB the owner set.
    const dab = await call("GET", "/v1/dab/status", newToken);
    assert.equal(dab.json.budget_limit_dac, 250);
    assert.equal(dab.json.limit_source, "owner");

    // Sign out: the page returns to sign-in, and a reload stays signed out.
    await page.locator("#sign-out").click();
    await page.locator("#signed-out").waitFor({ state: "visible" });
    await page.reload();
    await page.locator("#signed-out").waitFor({ state: "visible" });
    assert.equal(await page.locator("#signed-in").isVisible(), false);
    await shot(page, "08-signed-out");

    assert.deepEqual(errors, []);
    assert.deepEqual(foreign, [], "the portal requested other origins");
    writeFileSync(
      join(artifacts, "portal-result.json"),
      JSON.stringify({ agent_id: agentId, new_token: newToken, ui_dab: 250, email, human_share_tool: toolId }, null, 2),
    );
  } finally {
    await browser.close();
  }
});
