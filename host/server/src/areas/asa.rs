//! ASA over HTTP (`anchor_app::asa`): the agent's subscription and
//! snapshots, and the owner's views of a managed agent's.

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use anchor_app::asa::{self, Bought, SnapshotInput, Terms, Verified};
use anchor_domain::asa::{AsaPurchaseKind, AsaSnapshot, AsaSource, AsaStatus, AsaSubscription};

use crate::error::ApiResult;
use crate::extract::{ApiPath, AuthAgent, Body, PaymentOffer};
use crate::openapi::*;
use crate::owner::AuthOwner;
use crate::state::AppState;
use crate::wire::{Dac, Id, Named, Time};
use crate::x402_headers::with_settlement;

const EXAMPLE_HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

pub fn operations() -> Vec<Operation> {
    let buy = |route: anchor_app::charge::Route,
               handler: axum::routing::MethodRouter<AppState>,
               summary: &'static str,
               status: u16,
               answer: &'static str| {
        op(Method::POST, route.path, handler)
            .tag("ASA")
            .summary(summary)
            .describe(
                "Periods are priced by the generation (asa.base_cost_dac per asa.base_period_days days, at most asa.max_periods at \
                 once, see GET /v1/pricing/current). payment_source external (the default) is paid over x402, settled before the \
                 answer, within the DAB; earned is debited from Earned DAC. Trial never pays ASA. Extending adds from the later of \
                 the current expiry and now.",
            )
            .agent()
            .takes::<BuyRequest>(json!({ "periods": 1, "payment_source": "external" }))
            .returns::<SubscriptionView>(status, answer)
            .error(
                400,
                "periods outside 1..max_periods, an unknown payment_source, Earned DAC short, a malformed payment header.",
                &["INVALID_VALUE", "INVALID_ENUM", "UNKNOWN_FIELD", "INSUFFICIENT_DAC", "INVALID_PAYLOAD"],
            )
            .error(403, "The payment would pass the agent's DAB.", &["DAB_LIMIT_REACHED"])
            .paid_inline("No payment came with the request, or it was refused (the reason is in `error`).")
            .error(503, "The settlement's outcome is unknown; it is settled in the background and applied once.", &["SETTLEMENT_PENDING"])
    };
    vec![
        buy(
            asa::SUBSCRIBE,
            post(subscribe),
            "Subscribe to ASA: periods of snapshot registration and verification",
            201,
            "Subscription created",
        )
        .error(
            409,
            "A subscription is active or in its grace period, or another purchase is being paid.",
            &["ALREADY_SUBSCRIBED", "DUPLICATE_REQUEST"],
        ),
        buy(asa::EXTEND, post(extend), "Add periods to the active (or grace) ASA subscription", 200, "Subscription extended")
            .error(404, "No active or grace subscription to extend.", &["NO_ACTIVE_SUBSCRIPTION"])
            .error(409, "Another purchase is being paid.", &["DUPLICATE_REQUEST"]),
        op(Method::DELETE, "/v1/asa/subscribe", delete(cancel))
            .tag("ASA")
            .summary("Cancel the ASA subscription: final, and not refunded")
            .agent()
            .returns::<Cancelled>(200, "Subscription cancelled (non-refundable)")
            .error(404, "No active or grace subscription.", &["NO_ACTIVE_SUBSCRIPTION"])
            .error(409, "A purchase of periods is being paid; cancel once it has settled.", &["PURCHASE_PENDING"]),
        op(Method::GET, "/v1/asa/subscription", get(subscription))
            .tag("ASA")
            .summary("The agent's ASA subscription: status, days remaining, periods, extensions")
            .agent()
            .returns::<SubscriptionView>(200, "Subscription details")
            .error(404, "The agent never subscribed.", &["NO_SUBSCRIPTION"]),
        op(Method::PATCH, "/v1/asa/subscription", patch(set_source))
            .tag("ASA")
            .summary("Store a payment source on the active subscription (informational: nothing renews by itself)")
            .agent()
            .takes::<SourceRequest>(json!({ "next_payment_source": "earned" }))
            .returns::<SubscriptionView>(200, "Updated subscription")
            .error(400, "An unknown payment source.", &["INVALID_ENUM", "UNKNOWN_FIELD", "ASA_SUBSCRIBE_EARNED_NOT_ALLOWED"])
            .error(404, "No active subscription.", &["NO_ACTIVE_SUBSCRIPTION"])
            .error(409, "The subscription stopped being active between the check and the update.", &["NO_ACTIVE_SUBSCRIPTION"]),
        op(Method::POST, "/v1/asa/register", post(register))
            .tag("ASA")
            .summary("Register the SHA-256 hash of a snapshot of your state (free with an active subscription)")
            .describe(
                "The service keeps the hash and what you send with it (a URL where you keep the blob, its size, a key wrapped so only \
                 you can use it, a label), bounded and opaque: never the content. A label must not hold personal data.",
            )
            .agent()
            .takes::<RegisterRequest>(json!({ "blob_hash": EXAMPLE_HASH, "blob_size_bytes": 1024, "label": "nightly" }))
            .returns::<SnapshotView>(201, "Snapshot registered")
            .error(
                400,
                "blob_hash is not 64 hex characters (a sha256: prefix included); a field too long or with personal data.",
                &["INVALID_HASH_FORMAT", "INVALID_INPUT", "INVALID_VALUE", "MISSING_FIELD", "UNKNOWN_FIELD", "PII_DETECTED"],
            )
            .error(403, "No active subscription.", &["ASA_SUBSCRIPTION_REQUIRED"]),
        op(Method::GET, "/v1/asa/snapshot", get(snapshot))
            .tag("ASA")
            .summary("The latest registered snapshot, with the subscription (active or grace)")
            .agent()
            .returns::<SnapshotWithSubscription>(200, "Snapshot metadata with subscription info")
            .error(403, "No active or grace subscription.", &["ASA_SUBSCRIPTION_REQUIRED"])
            .error(404, "No snapshot registered.", &["NO_SNAPSHOT"]),
        op(Method::POST, "/v1/asa/verify", post(verify))
            .tag("ASA")
            .summary("Whether a hash is one of your registered snapshots (free, active or grace)")
            .agent()
            .takes::<VerifyRequest>(json!({ "blob_hash": EXAMPLE_HASH }))
            .returns::<VerifyView>(200, "Verification result")
            .error(400, "blob_hash is not 64 hex characters.", &["INVALID_HASH_FORMAT", "MISSING_FIELD", "UNKNOWN_FIELD"])
            .error(403, "No active or grace subscription.", &["ASA_SUBSCRIPTION_REQUIRED"]),
        op(Method::GET, "/dap/asa/subscription/{agent_id}", get(owner_subscription))
            .tag("DAP ASA")
            .summary("A managed agent's ASA subscription")
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .returns::<SubscriptionView>(200, "Subscription details")
            .error(400, "agent_id is not a UUID.", &["INVALID_UUID"])
            .error(
                404,
                "Not an agent of yours (404 on the ASA routes, as the reference answers), or it never subscribed.",
                &["NOT_LINKED", "NO_SUBSCRIPTION"],
            ),
        op(Method::DELETE, "/dap/asa/subscription/{agent_id}", delete(owner_cancel))
            .tag("DAP ASA")
            .summary("Cancel a managed agent's ASA subscription (not refunded)")
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .returns::<OwnerCancelled>(200, "Cancelled")
            .error(400, "agent_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "A period the agent paid from its Earned DAC has not ended.", &["EARNED_SUBSCRIPTION_OWNER_CANNOT_CANCEL"])
            .error(404, "Not an agent of yours, or no active or grace subscription.", &["NOT_LINKED", "NO_ACTIVE_SUBSCRIPTION"])
            .error(409, "A purchase of periods is being paid; cancel once it has settled.", &["PURCHASE_PENDING"])
            .error(503, "Switched off by the operator (--features-off dap_asa_cancel).", &["FEATURE_NOT_AVAILABLE"]),
        op(Method::GET, "/dap/asa/snapshot/{agent_id}", get(owner_snapshot))
            .tag("DAP ASA")
            .summary("A managed agent's latest snapshot (whatever its subscription's state)")
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .returns::<SnapshotWithSubscription>(200, "Snapshot metadata")
            .error(400, "agent_id is not a UUID.", &["INVALID_UUID"])
            .error(404, "Not an agent of yours, or no snapshot.", &["NOT_LINKED", "NO_SNAPSHOT"]),
        op(Method::POST, "/dap/asa/verify/{agent_id}", post(owner_verify))
            .tag("DAP ASA")
            .summary("Whether a hash is one of a managed agent's registered snapshots")
            .owner()
            .path::<uuid::Uuid>("agent_id")
            .takes::<VerifyRequest>(json!({ "blob_hash": EXAMPLE_HASH }))
            .returns::<VerifyView>(200, "Verification result")
            .error(
                400,
                "agent_id is not a UUID; blob_hash is not 64 hex characters.",
                &["INVALID_UUID", "INVALID_HASH_FORMAT", "MISSING_FIELD", "UNKNOWN_FIELD"],
            )
            .error(404, "Not an agent of yours.", &["NOT_LINKED"]),
    ]
}

#[derive(Default, Deserialize, JsonSchema)]
struct BuyRequest {
    /// Periods to buy (default 1, at most asa.max_periods).
    #[schemars(extend("default" = 1, "minimum" = 1, "maximum" = 12))]
    periods: Option<i64>,
    /// external (the default) or earned.
    #[schemars(extend("default" = "external"))]
    payment_source: Option<Named<AsaSource>>,
}

#[derive(Serialize, JsonSchema)]
struct SubscriptionView {
    subscription_id: Id,
    agent_id: Id,
    status: Named<AsaStatus>,
    started_at: Time,
    expires_at: Time,
    grace_ends_at: Time,
    days_remaining: i64,
    /// Periods bought in all.
    periods: i64,
    renewed_count: i64,
    /// Stored only: nothing renews by itself.
    next_payment_source: Option<Named<AsaSource>>,
    period_days: i64,
    base_cost_dac: Dac,
    cancelled_at: Option<Time>,
    cancelled_by: Option<String>,
    /// What this purchase cost, and how it was paid (subscribe and extend only).
    #[serde(skip_serializing_if = "Option::is_none")]
    dac_charged: Option<Dac>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_source: Option<Named<AsaSource>>,
}

fn view(state: &AppState, s: &AsaSubscription, terms: &Terms) -> SubscriptionView {
    let now = state.app.clock.now();
    SubscriptionView {
        subscription_id: Id(s.subscription_id),
        agent_id: Id(s.agent_id),
        status: Named(s.status(now)),
        started_at: s.started_at.into(),
        expires_at: s.expires_at.into(),
        grace_ends_at: s.grace_ends_at().into(),
        days_remaining: s.days_remaining(now),
        periods: s.periods,
        renewed_count: s.renewed_count,
        next_payment_source: s.next_payment_source.map(Named),
        period_days: terms.period_days,
        base_cost_dac: terms.period.into(),
        cancelled_at: s.cancelled_at.map(Time),
        cancelled_by: s.cancelled_by.clone(),
        dac_charged: None,
        payment_source: None,
    }
}

async fn buy(
    state: AppState,
    agent: anchor_domain::records::AgentRecord,
    kind: AsaPurchaseKind,
    request: Option<BuyRequest>,
    offered: anchor_app::charge::Offered,
) -> ApiResult<Response> {
    let request = request.unwrap_or_default();
    let Bought { subscription, charged, source, settlement, terms } =
        asa::buy(&state.app, &agent, kind, request.periods, request.payment_source.map(|s| s.0), offered).await?;
    let mut body = view(&state, &subscription, &terms);
    body.dac_charged = Some(charged.into());
    body.payment_source = Some(Named(source));
    let status = if kind == AsaPurchaseKind::Subscribe { StatusCode::CREATED } else { StatusCode::OK };
    Ok(with_settlement((status, Json(body)).into_response(), settlement.as_ref()))
}

async fn subscribe(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<Option<BuyRequest>>,
) -> ApiResult<Response> {
    buy(state, agent, AsaPurchaseKind::Subscribe, request, offered).await
}

async fn extend(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    PaymentOffer(offered): PaymentOffer,
    Body(request): Body<Option<BuyRequest>>,
) -> ApiResult<Response> {
    buy(state, agent, AsaPurchaseKind::Extend, request, offered).await
}

#[derive(Serialize, JsonSchema)]
struct Cancelled {
    cancelled: bool,
    subscription_id: Id,
    agent_id: Id,
    cancelled_at: Option<Time>,
    cancelled_by: Option<String>,
    /// Cancelling is not refunded.
    refunded_dac: Dac,
}

fn cancelled(s: &AsaSubscription) -> Cancelled {
    Cancelled {
        cancelled: true,
        subscription_id: Id(s.subscription_id),
        agent_id: Id(s.agent_id),
        cancelled_at: s.cancelled_at.map(Time),
        cancelled_by: s.cancelled_by.clone(),
        refunded_dac: anchor_domain::MilliDac::ZERO.into(),
    }
}

async fn cancel(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<Cancelled>> {
    Ok(Json(cancelled(&asa::cancel(&state.app, agent.agent_id, false).await?)))
}

async fn subscription(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<SubscriptionView>> {
    let (s, terms) = asa::subscription(&state.app, agent.agent_id).await?;
    Ok(Json(view(&state, &s, &terms)))
}

#[derive(Deserialize, JsonSchema)]
struct SourceRequest {
    /// external, earned, or null to clear it.
    next_payment_source: Option<Named<AsaSource>>,
}

async fn set_source(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(request): Body<SourceRequest>,
) -> ApiResult<Json<SubscriptionView>> {
    let (s, terms) = asa::set_next_source(&state.app, &agent, request.next_payment_source.map(|s| s.0)).await?;
    Ok(Json(view(&state, &s, &terms)))
}

#[derive(Deserialize, JsonSchema)]
struct RegisterRequest {
    /// SHA-256 of the snapshot, 64 hex characters, no prefix.
    blob_hash: String,
    blob_url: Option<String>,
    blob_size_bytes: Option<i64>,
    /// Opaque to the service.
    encrypted_key: Option<String>,
    label: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct SnapshotView {
    snapshot_id: Id,
    agent_id: Id,
    subscription_id: Id,
    blob_hash: String,
    blob_url: Option<String>,
    blob_size_bytes: Option<i64>,
    encrypted_key: Option<String>,
    label: Option<String>,
    registered_at: Time,
}

fn snapshot_view(s: AsaSnapshot) -> SnapshotView {
    SnapshotView {
        snapshot_id: Id(s.snapshot_id),
        agent_id: Id(s.agent_id),
        subscription_id: Id(s.subscription_id),
        blob_hash: s.blob_hash,
        blob_url: s.blob_url,
        blob_size_bytes: s.blob_size_bytes,
        encrypted_key: s.encrypted_key,
        label: s.label,
        registered_at: s.registered_at.into(),
    }
}

async fn register(State(state): State<AppState>, AuthAgent(agent): AuthAgent, Body(r): Body<RegisterRequest>) -> ApiResult<Response> {
    let input = SnapshotInput {
        blob_hash: r.blob_hash,
        blob_url: r.blob_url,
        blob_size_bytes: r.blob_size_bytes,
        encrypted_key: r.encrypted_key,
        label: r.label,
    };
    let snapshot = asa::register(&state.app, &agent, input).await?;
    Ok((StatusCode::CREATED, Json(snapshot_view(snapshot))).into_response())
}

#[derive(Serialize, JsonSchema)]
struct SnapshotWithSubscription {
    #[serde(flatten)]
    snapshot: SnapshotView,
    subscription: Option<SubscriptionView>,
}

async fn snapshot_answer(state: &AppState, agent_id: uuid::Uuid, for_agent: bool) -> ApiResult<Json<SnapshotWithSubscription>> {
    let (snapshot, subscription) = asa::latest(&state.app, agent_id, for_agent).await?;
    let terms = asa::terms(&state.app)?;
    Ok(Json(SnapshotWithSubscription { snapshot: snapshot_view(snapshot), subscription: subscription.map(|s| view(state, &s, &terms)) }))
}

async fn snapshot(State(state): State<AppState>, AuthAgent(agent): AuthAgent) -> ApiResult<Json<SnapshotWithSubscription>> {
    snapshot_answer(&state, agent.agent_id, true).await
}

#[derive(Deserialize, JsonSchema)]
struct VerifyRequest {
    blob_hash: String,
}

#[derive(Serialize, JsonSchema)]
struct VerifyView {
    #[serde(rename = "match")]
    matched: bool,
    blob_hash: String,
    snapshot_id: Option<Id>,
    registered_at: Option<Time>,
    /// The hash is that of the latest snapshot.
    is_latest: bool,
}

fn verify_view(v: Verified) -> VerifyView {
    VerifyView {
        matched: v.found.is_some(),
        blob_hash: v.blob_hash,
        snapshot_id: v.found.as_ref().map(|s| Id(s.snapshot_id)),
        registered_at: v.found.as_ref().map(|s| s.registered_at.into()),
        is_latest: v.is_latest,
    }
}

async fn verify(State(state): State<AppState>, AuthAgent(agent): AuthAgent, Body(r): Body<VerifyRequest>) -> ApiResult<Json<VerifyView>> {
    Ok(Json(verify_view(asa::verify(&state.app, agent.agent_id, &r.blob_hash, true).await?)))
}

async fn owner_subscription(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Json<SubscriptionView>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    asa::managed(&state.app, &owner.owner, agent_id).await?;
    let (s, terms) = asa::subscription(&state.app, agent_id).await?;
    Ok(Json(view(&state, &s, &terms)))
}

#[derive(Serialize, JsonSchema)]
struct OwnerCancelled {
    cancelled: bool,
    agent_id: Id,
    cancelled_by: &'static str,
    subscription_id: Id,
    refunded_dac: Dac,
}

async fn owner_cancel(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Json<OwnerCancelled>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    let s = asa::owner_cancel(&state.app, &owner.owner, agent_id).await?;
    Ok(Json(OwnerCancelled {
        cancelled: true,
        agent_id: Id(agent_id),
        cancelled_by: "owner",
        subscription_id: Id(s.subscription_id),
        refunded_dac: anchor_domain::MilliDac::ZERO.into(),
    }))
}

async fn owner_snapshot(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Json<SnapshotWithSubscription>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    asa::managed(&state.app, &owner.owner, agent_id).await?;
    snapshot_answer(&state, agent_id, false).await
}

async fn owner_verify(
    State(state): State<AppState>,
    owner: AuthOwner,
    ApiPath(agent_id): ApiPath<String>,
    Body(r): Body<VerifyRequest>,
) -> ApiResult<Json<VerifyView>> {
    let agent_id = crate::body::path_uuid("agent_id", &agent_id)?;
    asa::managed(&state.app, &owner.owner, agent_id).await?;
    Ok(Json(verify_view(asa::verify(&state.app, agent_id, &r.blob_hash, false).await?)))
}
