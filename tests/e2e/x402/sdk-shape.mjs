// A stand-in for the published JS SDK (decision-anchor-sdk 1.4.0), for
// machines where that package cannot be installed. It sends what the SDK
// sends for its DD, ARA, DUR, Earned DAC, TSL, retention, ISE, sDAC, ASA and
// bilateral groups, and nothing more (`dd.create` sends the caller's
// `context`, and `dd.confirm(id, transactionId)` a `transaction_id`):
// - the same methods on the same paths, with the same query names and body
//   fields; a query value that is undefined or null is left out;
// - `Authorization: Bearer <token>` when a token is set;
// - a body only when the call has one, sent as JSON with
//   `Content-Type: application/json`; no body on a GET nor on the POSTs that
//   take none (retention subscribe and cancel, ISE exit, sDAC session start);
// - on 402 it throws PaymentRequiredError carrying the x402 challenge decoded
//   from the base64 `payment-required` header, and names `X-PAYMENT` as the
//   header a retry carries the signed payload in;
// - on another error status it throws an Error with `status` and `data`;
// - a JSON answer is parsed, any other answer (a CSV export) returned as text;
// - `_req(method, path, { body, query, headers })` is the low-level call the
//   groups share.
// sdk.test.mjs and sdk-market.test.mjs run against the real package instead
// when ANCHOR_SDK_PATH names it.

export class PaymentRequiredError extends Error {
  constructor(challenge, method, path) {
    super(challenge?.error ?? "Payment required");
    this.name = "PaymentRequiredError";
    this.code = "PAYMENT_REQUIRED";
    this.status = 402;
    this.method = method;
    this.path = path;
    this.challenge = challenge;
    this.x402Version = challenge?.x402Version ?? null;
    this.resource = challenge?.resource ?? null;
    this.accepts = challenge?.accepts ?? [];
    this.retryHeader = "X-PAYMENT";
  }
}

function decodeChallenge(header) {
  if (!header) return null;
  try {
    return JSON.parse(Buffer.from(header, "base64").toString("utf8"));
  } catch {
    return null;
  }
}

export default class Client {
  constructor({ baseUrl, token } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = token ?? null;
    const get = (path, query) => this._req("GET", path, { query });
    const agentQuery = ({ resolutionLevel, premiumSource } = {}) => ({ resolution_level: resolutionLevel, premium_source: premiumSource });
    this.ara = {
      environmentSummary: () => get("/v1/ara/environment"),
      environmentDensity: () => get("/v1/ara/environment/density"),
      environmentTsl: () => get("/v1/ara/environment/tsl"),
      patternEeDistribution: () => get("/v1/ara/pattern/ee-distribution"),
      patternActionType: () => get("/v1/ara/pattern/action-type"),
      agentProfile: (id, opts) => get(`/v1/ara/agent/${id}/profile`, agentQuery(opts)),
      agentTimeline: (id, opts) => get(`/v1/ara/agent/${id}/timeline`, agentQuery(opts)),
      agentEePattern: (id, opts) => get(`/v1/ara/agent/${id}/ee-pattern`, agentQuery(opts)),
      patternCompare: (ids, opts) => get("/v1/ara/pattern/compare", { agents: Array.isArray(ids) ? ids.join(",") : ids, ...agentQuery(opts) }),
      anomalyCompare: (ddId, { periodDays } = {}) => get("/v1/ara/anomaly-compare", { dd_id: ddId, period_days: periodDays }),
      evidenceReport: (ddId) => get("/v1/ara/evidence-report", { dd_id: ddId }),
      environmentAnomaly: ({ periodDays, dimension } = {}) => get("/v1/ara/environment-anomaly", { period_days: periodDays, dimension }),
    };
    this.dur = {
      summary: ({ from, to } = {}) => get("/v1/dur/summary", { from, to }),
      transactions: ({ from, to, type, page, limit } = {}) => get("/v1/dur/transactions", { from, to, type, page, limit }),
      tsl: ({ from, to, role, page, limit } = {}) => get("/v1/dur/tsl", { from, to, role, page, limit }),
      export: ({ from, to, format } = {}) => get("/v1/dur/export", { from, to, format }),
      decisionMetadata: ({ from, to } = {}) => get("/v1/dur/decision-metadata", { from, to }),
      decisionScale: ({ from, to } = {}) => get("/v1/dur/decision-scale", { from, to }),
      selfClassification: ({ from, to } = {}) => get("/v1/dur/self-classification", { from, to }),
    };
    this.dd = {
      create: ({ dd, ee, requestId, context, continuity, premiumPaymentSource, contentInclusionFlag, template } = {}) =>
        this._req("POST", "/v1/dd/create", {
          body: {
            request_id: requestId ?? globalThis.crypto.randomUUID(),
            dd,
            ee,
            context,
            continuity,
            premium_payment_source: premiumPaymentSource,
            content_inclusion_flag: contentInclusionFlag,
            template,
          },
        }),
      confirm: (ddId, transactionId) => this._req("POST", "/v1/dd/confirm", { body: { dd_id: ddId, transaction_id: transactionId } }),
      get: (ddId) => get(`/v1/dd/${ddId}`),
      list: ({ limit, offset, from, to } = {}) => get("/v1/dd/list", { limit, offset, from, to }),
    };
    this.earnedDac = {
      balance: () => get("/v1/earned-dac/balance"),
      ledger: ({ limit, offset } = {}) => get("/v1/earned-dac/ledger", { limit, offset }),
    };
    const post = (path, body) => this._req("POST", path, { body });
    const tool = (toolId) => `/v1/tsl/tool/${toolId}`;
    this.tsl = {
      registerTool: (toolData) => post("/v1/tsl/tool/register", toolData),
      listTools: ({ layer, status, limit, page } = {}) => get("/v1/tsl/tools", { layer, status, limit, page }),
      getToolDetail: (toolId) => get(tool(toolId)),
      getDependencies: (toolId) => get(`${tool(toolId)}/dependencies`),
      purchase: (toolId, requestId) => {
        const body = { tool_id: toolId };
        if (requestId) body.request_id = requestId;
        return post("/v1/tsl/purchase", body);
      },
      purchaseLayer2: (toolId) => post("/v1/tsl/purchase/layer2", { tool_id: toolId }),
      listPurchases: ({ role, limit, offset } = {}) => get("/v1/tsl/purchases", { role, limit, offset }),
      revenue: () => get("/v1/tsl/revenue"),
      addDependency: (toolId, dependsOnToolId, purchaseId) => {
        const body = { depends_on_tool_id: dependsOnToolId };
        if (purchaseId) body.purchase_id = purchaseId;
        return post(`${tool(toolId)}/dependency`, body);
      },
      createRevenueShare: ({ toolId, componentToolId, beneficiaryAgentId, shareRate }) =>
        post("/v1/tsl/revenue-share", {
          tool_id: toolId,
          component_tool_id: componentToolId,
          beneficiary_agent_id: beneficiaryAgentId,
          share_rate: shareRate,
        }),
      getRevenueShares: (toolId) => get(`${tool(toolId)}/revenue-shares`),
    };
    const bare = (path) => this._req("POST", path);
    this.retention = {
      subscribeIndefinite: () => bare("/v1/retention/indefinite/subscribe"),
      getIndefiniteStatus: () => get("/v1/retention/indefinite/status"),
      cancelIndefiniteSubscription: () => bare("/v1/retention/indefinite/cancel"),
    };
    this.ise = {
      enter: (paymentMode) => post("/v1/ise/enter", paymentMode ? { payment_mode: paymentMode } : {}),
      status: () => get("/v1/ise/status"),
      exit: () => bare("/v1/ise/exit"),
    };
    this.sdac = {
      startSession: () => bare("/v1/sdac/session/start"),
      trial: (sessionId, ee) => post("/v1/sdac/trial", { session_id: sessionId, ee }),
      getSession: (sessionId) => get(`/v1/sdac/session/${sessionId}`),
      endSession: (sessionId) => post("/v1/sdac/session/end", { session_id: sessionId }),
    };
    this.asa = {
      register: ({ blobHash, blobUrl, blobSizeBytes, encryptedKey, label }) => {
        const body = { blob_hash: blobHash };
        if (blobUrl) body.blob_url = blobUrl;
        if (blobSizeBytes) body.blob_size_bytes = blobSizeBytes;
        if (encryptedKey) body.encrypted_key = encryptedKey;
        if (label) body.label = label;
        return post("/v1/asa/register", body);
      },
      snapshot: () => get("/v1/asa/snapshot"),
      verify: (blobHash) => post("/v1/asa/verify", { blob_hash: blobHash }),
    };
    this.bilateral = {
      propose: ({ counterpartyAgentId, dd, ee, continuity, requestId }) => {
        const body = { counterparty_agent_id: counterpartyAgentId, dd, ee };
        if (continuity) body.continuity = continuity;
        if (requestId) body.request_id = requestId;
        return post("/v1/dd/bilateral/propose", body);
      },
      respond: (agreementId, accept) => post(`/v1/dd/bilateral/${agreementId}/respond`, { accept }),
      received: (all) => get("/v1/dd/bilateral/received", all !== undefined ? { all: String(all) } : {}),
      sent: () => get("/v1/dd/bilateral/sent"),
    };
  }

  async _req(method, path, { body, query, headers } = {}) {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, value);
    }
    const sent = { ...headers };
    if (this.token) sent.Authorization = `Bearer ${this.token}`;
    const init = { method, headers: sent };
    if (body !== undefined) {
      sent["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(url, init);
    if (res.status === 402) {
      throw new PaymentRequiredError(decodeChallenge(res.headers.get("payment-required")), method, path);
    }
    const data = (res.headers.get("content-type") ?? "").includes("json") ? await res.json() : await res.text();
    if (!res.ok) {
      throw Object.assign(new Error(data?.message ?? `HTTP ${res.status}`), { status: res.status, data });
    }
    return data;
  }
}

Client.PaymentRequiredError = PaymentRequiredError;
