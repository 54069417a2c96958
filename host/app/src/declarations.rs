//! Declaring decisions: DD create (priced by the pricing component, paid
//! through the charge pipeline) and confirm (settle, fix the integrity hash,
//! record usage and queue the log leaf, in one transaction).

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use rand::RngCore;
use uuid::Uuid;

use anchor_domain::MilliDac;
use anchor_domain::declarations::Declaration;
use anchor_domain::declarations::dd::DdFields;
use anchor_domain::declarations::ee::{self, EeFields, Scope};
use anchor_domain::declarations::template::Template;
use anchor_domain::integrity::integrity_hash;
use anchor_domain::payments::{CostComponent, PaymentStatus, SettlementStatus};
use anchor_domain::records::{AgentRecord, ListFilter, Settling, StoredDeclaration, UsageEntry};
use anchor_ports::{Anchoring, Created, DirectRead, DueKey, EarnedPart, FoundAgent, NewAgreement, NewDeclaration, PaymentDue};
use anchor_x402::settlement::Settled;

use crate::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use crate::{AppError, AppResult, Services};

pub const CREATE: Route = Route { method: "POST", path: "/v1/dd/create" };

pub use crate::requests::{CreateInput, CreateRequest, DdRequest, EeInput, EeRequest, Form, PremiumSource, TemplateRequest};

/// Expands the preset, if any, over the sent axes.
pub fn resolve_scope(services: &Services, input: &EeInput) -> AppResult<Scope> {
    let mut retention = input.retention;
    let mut integrity = input.integrity;
    let mut disclosure = input.disclosure;
    let mut responsibility = input.responsibility;
    if let Some(name) = &input.preset {
        let presets = services.pricing.presets()?;
        let Some(preset) = presets.iter().find(|p| &p.name == name) else {
            let names: Vec<&str> = presets.iter().filter(|p| p.enabled).map(|p| p.name.as_str()).collect();
            return Err(AppError::invalid(
                "INVALID_EE_PRESET",
                format!("ee.ee_preset {} is not a preset; active presets: {}", anchor_domain::brief(name), names.join(", ")),
            ));
        };
        if !preset.enabled {
            return Err(AppError::invalid(
                "EE_PRESET_DISABLED",
                format!("ee.ee_preset {} is disabled by the operator", anchor_domain::brief(name)),
            ));
        }
        retention = Some(preset.retention);
        integrity = Some(preset.integrity);
        disclosure = Some(preset.disclosure);
        responsibility = Some(preset.responsibility);
    }
    match (retention, integrity, disclosure, responsibility) {
        (Some(retention), Some(integrity), Some(disclosure), Some(responsibility)) => {
            Ok(Scope { retention, integrity, disclosure, responsibility, content_scope: input.content_scope, delegation: input.delegation })
        }
        _ => Err(AppError::invalid("MISSING_FIELD", "the four EE axes are required unless ee.ee_preset is sent")),
    }
}

/// Refuses a declaration its agent's owner's content-inclusion policy forbids.
/// The service records what the agent declared or refuses it; it never
/// rewrites a declaration.
pub fn enforce_policy(agent: &AgentRecord, content_inclusion: bool) -> AppResult<()> {
    let Some(required) = agent.owner_policy.and_then(|p| p.required_flag()) else {
        return Ok(());
    };
    if content_inclusion != required {
        return Err(AppError::forbidden(
            "CONTENT_INCLUSION_POLICY",
            format!(
                "this agent's owner requires content_inclusion_flag {}{}; nothing was recorded or charged",
                u8::from(required),
                if required { " with a template" } else { " and no template" }
            ),
        ));
    }
    Ok(())
}

/// Records one declaration, paid from Trial or by a reserved x402 payment.
struct RecordDeclaration<'a> {
    services: &'a Services,
    new: NewDeclaration,
    now: DateTime<Utc>,
}

#[async_trait]
impl Commit for RecordDeclaration<'_> {
    type Output = Created;

    async fn commit(&self, funding: Funding) -> AppResult<Committed<Created>> {
        let mut new = self.new.clone();
        if let Funding::External { payment, trial_part } = funding {
            new.external = Some(*payment);
            new.base_from_trial = trial_part > MilliDac::ZERO;
        }
        Ok(match self.services.store.create_declaration(&new, self.now).await? {
            Created::TrialCannotPay { balance, expired } => Committed::TrialShort { balance, expired },
            Created::PaymentReplayed => Committed::NonceUsed,
            Created::DabReached { limit, spent } => Committed::DabReached { limit, spent },
            Created::EarnedShort { balance } => Committed::EarnedShort { balance },
            done => Committed::Done(done),
        })
    }

    fn debited(output: &Created) -> bool {
        matches!(output, Created::New { .. })
    }
}

/// DD create: validates what needs the store or the pricing generation, prices
/// the EE, takes payment and records the declaration. A request_id used before
/// returns the earlier record.
pub async fn create(services: &Services, agent: &AgentRecord, request: CreateRequest, offered: Offered) -> AppResult<StoredDeclaration> {
    let input = request.into_input(services.clock.now())?;
    record(services, agent, input, offered, None).await
}

/// [`create`] for an agent found by its token (`agents::authenticate_for_create`).
/// An agent this host remembers is used
/// as read only where the write checks its token again: a create with no
/// parent and no Earned DAC, that the owner's policy allows, Trial paying
/// the whole, or x402 with a payment that verifies (the write checking that
/// Trial still cannot pay the base fee).
/// Anything else (and a write that is not taken) runs again with the agent
/// read afresh, so what was remembered never refuses, charges or answers
/// on its own (decision 0086).
pub async fn create_found(
    services: &Services,
    found: &FoundAgent,
    request: CreateRequest,
    offered: Offered,
) -> AppResult<StoredDeclaration> {
    let input = request.into_input(services.clock.now())?;
    if !found.remembered {
        return record(services, &found.agent, input, offered, None).await;
    }
    let check = Some(found.agent.token_hash);
    if let Some(stored) = record_as(services, &found.agent, input.clone(), offered.clone(), None, check).await? {
        return Ok(stored);
    }
    let agent = crate::agents::read_again(services, &found.agent).await?.ok_or(AppError::TokenRefused)?;
    record(services, &agent, input, offered, None).await
}

/// DD create, or a bilateral proposal (`agreement`): the proposal is paid
/// over x402 alone, reserved with the record and settled when it is confirmed.
pub(crate) async fn record(
    services: &Services,
    agent: &AgentRecord,
    input: CreateInput,
    offered: Offered,
    agreement: Option<NewAgreement>,
) -> AppResult<StoredDeclaration> {
    record_as(services, agent, input, offered, agreement, None)
        .await?
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("a create with no token to check was answered as unchecked")))
}

/// [`record`]; with `check` (the token a remembered agent was found by),
/// `None` for whatever the remembered agent cannot decide alone.
async fn record_as(
    services: &Services,
    agent: &AgentRecord,
    input: CreateInput,
    offered: Offered,
    agreement: Option<NewAgreement>,
    check: Option<[u8; 32]>,
) -> AppResult<Option<StoredDeclaration>> {
    let now = services.clock.now();
    let scope = resolve_scope(services, &input.ee)?;
    if let Err(refused) = enforce_policy(agent, input.content_inclusion) {
        return match check {
            Some(_) => Ok(None),
            None => Err(refused),
        };
    }
    if let Some(key) = input.template.as_ref().and_then(|t| t.self_classification.as_ref()) {
        let known = services.store.classifications_for_agent(agent.agent_id).await?;
        if !known.iter().any(|c| &c.key == key) {
            return Err(AppError::invalid(
                "INVALID_VALUE",
                format!(
                    "template.self_classification {} is not registered; GET /v1/classification lists the keys you may use",
                    anchor_domain::brief(key)
                ),
            ));
        }
    }
    if scope.retention == ee::Retention::Indefinite {
        crate::retention::require_active(services, agent.agent_id).await?;
    }

    let quote = services.pricing.quote(scope)?;
    let generation = services.pricing.generation().clone();
    // premium_payment_source earned: Earned DAC pays the premium, debited with
    // the record (and refunded if it is never anchored); Trial or x402 the base fee.
    let earned = input.premium_source == Some(PremiumSource::Earned) && quote.premium() > MilliDac::ZERO;
    let earned_premium = match earned {
        true => Some(EarnedPart { amount: quote.premium(), threshold: crate::earned::terms(services)?.threshold }),
        false => None,
    };

    // A random salt; linked to a trace, one that commits to the trace id
    // under a random key kept beside the record.
    let mut salt = [0u8; 32];
    rand::rng().fill_bytes(&mut salt);
    let trace_key = input.trace.map(|trace| {
        let key = salt;
        salt = anchor_domain::trace::salt(&key, trace);
        key
    });
    let dd_id = anchor_domain::record_id();
    let parent_dd_id = input.dd.parent_dd_id;
    let declaration = Declaration {
        dd_id,
        ee_id: anchor_domain::record_id(),
        agent_id: agent.agent_id,
        dd: input.dd,
        ee: EeFields {
            preset: input.ee.preset.clone(),
            scope,
            direct_access_period: input.ee.period,
            direct_access_quota: input.ee.quota,
            access_class: input.ee.access_class,
        },
        content_inclusion: input.content_inclusion,
        template: input.template,
        anchored_at: now,
        lineage_group_id: dd_id,
        pricing_version: generation.version,
        pricing_sha256: generation.sha256,
        dac_amount: quote.total,
        salt,
        trace_key,
    };
    let earned_part = earned_premium.map_or(MilliDac::ZERO, |e| e.amount);
    let new = NewDeclaration {
        direct_access_expires_at: declaration.ee.direct_access_period.end_from(now),
        declaration,
        request_id: input.request_id,
        subtotal: quote.subtotal,
        base_fee: quote.base_fee,
        multiplier_permille: quote.multiplier_permille,
        monthly: quote.monthly,
        external: None,
        base_from_trial: false,
        earned_premium,
        agreement,
        token_check: check,
    };
    // How Trial pays (decision 0062): the whole price when its balance
    // covers it; else, when it covers the base fee, the base fee, and x402
    // the premium; else nothing, and x402 the whole price. Sent, a
    // premium_payment_source external asks for the split even when Trial
    // could pay the whole.
    let trial = if agreement.is_some() { TrialUse::None } else { trial_use(agent, &quote, input.premium_source, earned_part, now) };
    // A remembered agent decides only a write that checks its token again:
    // Trial paying the whole, or (its payment verified ahead) x402, where
    // the write checks that Trial still cannot pay the base fee.
    if check.is_some()
        && (earned || parent_dd_id.is_some() || agreement.is_some() || !matches!(trial, TrialUse::Whole | TrialUse::Short { .. }))
    {
        return Ok(None);
    }
    // A split is only tried with a payment, and a proposal is paid over
    // x402 alone: a parent that is not there is said before the challenge
    // (the commit says it for the other uses).
    if let Some(parent) = parent_dd_id
        && (matches!(trial, TrialUse::Part(_)) || agreement.is_some())
    {
        parent_of(services, agent.agent_id, parent).await?;
    }
    let order = Order {
        agent_id: agent.agent_id,
        route: if agreement.is_some() { crate::agreements::PROPOSE } else { CREATE },
        path: None,
        total: quote.total,
        description: if agreement.is_some() {
            format!("Bilateral decision declaration of {} DAC (paid over x402; settled when you confirm after acceptance)", quote.total)
        } else if matches!(trial, TrialUse::Part(_)) {
            format!("Premium of a decision declaration ({} DAC); Trial pays its {} DAC base fee", quote.premium(), quote.base_fee)
        } else if earned {
            format!("Base fee of a decision declaration ({} DAC); Earned DAC pays its {} DAC premium", quote.base_fee, quote.premium())
        } else {
            format!("Decision declaration of {} DAC", quote.total)
        },
        trial: match trial {
            // Tried, so that a parent that is not there is said before any challenge.
            TrialUse::Short { .. } if parent_dd_id.is_some() => TrialUse::Whole,
            trial => trial,
        },
        earned: earned_part,
        offered,
        settle: Settle::AtConfirm,
        pending: None,
    };
    // Trial not tried (its balance cannot pay): a request_id used before is
    // still answered with its record, not with a challenge. The DAB the
    // payment is checked against comes with it, in the same statement. A
    // payment that verifies needs neither read first: the commit answers an
    // earlier request_id with its record, and checks the DAB under the
    // agent's lock, before it reserves anything.
    // So is one Trial pays in part and x402 the rest (its premium), sent
    // again without a payment (a client retrying after a timeout).
    let split_unpaid = matches!(order.trial, TrialUse::Part(_)) && matches!(order.offered, Offered::None);
    let mut known = charge::Known::Nothing;
    if matches!(order.trial, TrialUse::Short { .. }) || split_unpaid {
        if let Some(verified) = charge::verify_ahead(services, &order) {
            known = charge::Known::Verified(Box::new(verified));
        } else if check.is_some() {
            return Ok(None);
        } else {
            let (period_start, _) = anchor_domain::dab::period(now);
            let (earlier, status) = services.store.declaration_by_request_and_dab(agent.agent_id, input.request_id, period_start).await?;
            if let Some(earlier) = earlier {
                same_request(&earlier, &new.declaration)?;
                return Ok(Some(earlier));
            }
            known = charge::Known::Dab(charge::KnownDab { period_start, status });
        }
    }
    let commit = RecordDeclaration { services, new, now };
    let created = charge::charge_knowing(services, order, &commit, known).await?;
    match created {
        Created::New { record, .. } => {
            services.metrics.declarations_created.inc();
            let declared = record.declaration.ee.scope.integrity;
            if declared.beyond(services.trust.reachable_level()) {
                services.metrics.beyond_reach(declared.as_str());
            }
            Ok(Some(*record))
        }
        Created::Replayed(earlier) => {
            same_request(&earlier, &commit.new.declaration)?;
            Ok(Some(*earlier))
        }
        Created::Unchecked => Ok(None),
        Created::ParentNotFound => match parent_dd_id {
            Some(parent) if services.store.is_deidentified(parent).await? => Err(deidentified(parent)),
            _ => Err(AppError::not_found("DD_NOT_FOUND", "the parent_dd_id names no declaration")),
        },
        Created::ParentForeign => {
            Err(AppError::forbidden("FORBIDDEN", "the parent declaration belongs to another agent; lineage stays within one agent"))
        }
        Created::TrialCannotPay { .. } | Created::PaymentReplayed | Created::DabReached { .. } | Created::EarnedShort { .. } => {
            Err(AppError::Internal(anyhow::anyhow!("declaration {dd_id}: payment state changed during create")))
        }
    }
}

/// A request_id used before answers with its record only when the request
/// declares the same thing (400 `REQUEST_ID_USED` otherwise, naming the
/// first part that differs): a key reused by mistake for another decision
/// must not silently return a record of the first. What the service filled
/// in itself (a time, a demoted retention) is not compared.
pub(crate) fn same_request(earlier: &StoredDeclaration, asked: &Declaration) -> AppResult<()> {
    same_parts(earlier, &asked.dd, &asked.ee, asked.content_inclusion, &asked.template)
}

/// [`same_request`] for a request as sent (a bilateral proposal's, whose
/// replay is found before anything is priced or written).
pub(crate) fn same_input(services: &Services, earlier: &StoredDeclaration, input: &CreateInput) -> AppResult<()> {
    let ee = EeFields {
        preset: input.ee.preset.clone(),
        scope: resolve_scope(services, &input.ee)?,
        direct_access_period: input.ee.period,
        direct_access_quota: input.ee.quota,
        access_class: input.ee.access_class,
    };
    same_parts(earlier, &input.dd, &ee, input.content_inclusion, &input.template)
}

fn same_parts(
    earlier: &StoredDeclaration,
    asked_dd: &DdFields,
    asked_ee: &EeFields,
    content_inclusion: bool,
    template: &Option<Template>,
) -> AppResult<()> {
    let before = &earlier.declaration;
    let mut dd = asked_dd.clone();
    if dd.decision_at.is_none() {
        dd.decision_at = before.dd.decision_at;
    }
    let mut scope = asked_ee.scope;
    if earlier.retention_demoted_at.is_some() {
        scope.retention = before.ee.scope.retention;
    }
    let differs = if dd != before.dd {
        Some("dd")
    } else if asked_ee.preset != before.ee.preset || scope != before.ee.scope {
        Some("ee")
    } else if asked_ee.direct_access_period != before.ee.direct_access_period
        || asked_ee.direct_access_quota != before.ee.direct_access_quota
        || asked_ee.access_class != before.ee.access_class
    {
        Some("ee's direct access")
    } else if content_inclusion != before.content_inclusion || *template != before.template {
        Some("content_inclusion_flag or template")
    } else {
        None
    };
    match differs {
        None => Ok(()),
        Some(part) => Err(AppError::invalid(
            "REQUEST_ID_USED",
            format!(
                "request_id {} was used for declaration {} with another {part}; send a fresh request_id for a new declaration, \
                 or the same body to get the earlier answer",
                earlier.request_id, before.dd_id
            ),
        )),
    }
}

/// What Trial pays of a declaration priced `quote` (Earned DAC paying
/// `earned` of it), from the balance read with the agent's token.
fn trial_use(
    agent: &AgentRecord,
    quote: &anchor_domain::pricing::Quote,
    premium_source: Option<PremiumSource>,
    earned: MilliDac,
    now: DateTime<Utc>,
) -> TrialUse {
    let expired = agent.trial_expires_at <= now;
    let covers = |amount: MilliDac| !expired && agent.trial_balance >= amount;
    let premium = quote.premium();
    let asked_split = premium_source == Some(PremiumSource::External) && premium > MilliDac::ZERO;
    if !asked_split && covers(quote.total - earned) {
        TrialUse::Whole
    } else if earned == MilliDac::ZERO && premium > MilliDac::ZERO && covers(quote.base_fee) {
        TrialUse::Part(quote.base_fee)
    } else {
        TrialUse::Short { balance: agent.trial_balance, expired }
    }
}

/// A continuation's parent: this agent's declaration (404, 410 or 403 otherwise).
async fn parent_of(services: &Services, agent_id: Uuid, parent: Uuid) -> AppResult<()> {
    match services.store.declaration(parent).await? {
        Some(stored) if stored.declaration.agent_id == agent_id => Ok(()),
        Some(_) => Err(AppError::forbidden("FORBIDDEN", "the parent declaration belongs to another agent; lineage stays within one agent")),
        None if services.store.is_deidentified(parent).await? => Err(deidentified(parent)),
        None => Err(AppError::not_found("DD_NOT_FOUND", "the parent_dd_id names no declaration")),
    }
}

/// 410 `RECORD_DEIDENTIFIED`: the record's retention ended and it was
/// converted to statistics; only its log leaf is left of it.
pub fn deidentified(dd_id: Uuid) -> AppError {
    AppError::Gone {
        code: "RECORD_DEIDENTIFIED",
        message: format!(
            "declaration {dd_id} is past its retention period and was de-identified; its log leaf remains, so a receipt saved earlier still verifies"
        ),
    }
}

/// The declaration: 404 `DD_NOT_FOUND` if there is none, 410 once de-identified.
pub async fn stored(services: &Services, dd_id: Uuid) -> AppResult<StoredDeclaration> {
    match services.store.declaration(dd_id).await? {
        Some(stored) => Ok(stored),
        None => Err(missing(services, dd_id).await?),
    }
}

/// Why a declaration was not found: de-identified (410), or never recorded.
async fn missing(services: &Services, dd_id: Uuid) -> AppResult<AppError> {
    Ok(match services.store.is_deidentified(dd_id).await? {
        true => deidentified(dd_id),
        false => AppError::not_found("DD_NOT_FOUND", format!("no declaration {dd_id}")),
    })
}

/// The declaration, if it exists and belongs to `agent` (410 once de-identified).
pub async fn owned(services: &Services, agent_id: Uuid, dd_id: Uuid) -> AppResult<StoredDeclaration> {
    let stored = stored(services, dd_id).await?;
    must_own(&stored, agent_id)?;
    Ok(stored)
}

/// Refuses a declaration that belongs to another agent than `agent_id`.
fn must_own(stored: &StoredDeclaration, agent_id: Uuid) -> AppResult<()> {
    match stored.declaration.agent_id == agent_id {
        true => Ok(()),
        false => Err(AppError::forbidden("FORBIDDEN", "this declaration belongs to another agent")),
    }
}

/// What confirming a declaration fixed.
#[derive(Clone, Debug)]
pub struct Confirmed {
    pub dd_id: Uuid,
    pub anchored_at: DateTime<Utc>,
    pub confirmed_at: DateTime<Utc>,
    pub integrity_hash: String,
    pub usage: Vec<UsageEntry>,
    /// For an externally paid declaration: its settlement, of the payment
    /// made at the create (or the bilateral proposal).
    pub settlement: Option<charge::Settlement>,
}

/// The x402 resource a declaration's external payment was made at (what
/// its 402 named): the create, or the bilateral proposal.
pub(crate) fn payment_resource(services: &Services, stored: &StoredDeclaration) -> String {
    let path = if stored.agreement_id.is_some() { crate::agreements::PROPOSE.path } else { CREATE.path };
    format!("{}{path}", services.config.public_url)
}

fn already_confirmed() -> AppError {
    AppError::Conflict { code: "ALREADY_CONFIRMED", message: "this declaration is already confirmed; confirmation happens once".into() }
}

fn payment_expired() -> AppError {
    AppError::Gone {
        code: "PAYMENT_EXPIRED",
        message: "the 30-minute payment window closed and the reservation was released; nothing was charged and this declaration can no longer be confirmed".into(),
    }
}

/// A declaration read to be confirmed, with its agent's authentication
/// ([`authenticate_to_confirm`]); with the token it was found by when it is
/// the record this host's create stored lately, unread (decision 0088).
pub struct ToConfirm(StoredDeclaration, Option<Settling>, Option<[u8; 32]>);

/// The agent whose current token `token` is (as [`crate::agents::authenticate`]
/// finds it) and, when that agent recorded `dd_id`, the declaration to
/// confirm: the record this host's create stored within the last second by
/// that token (both unread; the confirmation's write checks the token), or
/// one read where the token's agent owns it, which is what a confirmation
/// asks. Otherwise (no such token, another agent's declaration, none) the
/// agent is looked up alone and [`confirm`] reads the record and says what
/// is wrong with it.
pub async fn authenticate_to_confirm(services: &Services, token: &str, dd_id: Uuid) -> AppResult<(Option<AgentRecord>, Option<ToConfirm>)> {
    let Some(hash) = crate::agents::token_hash(token) else { return Ok((None, None)) };
    // A payment is settled before the write that checks the token: only
    // where settling moves nothing outside that write (local settlement).
    let paid = services.settler.mode() == "local";
    if let Some((agent, stored, settling)) = services.store.recent_declaration_to_confirm_as(&hash, dd_id, paid)
        && crate::agents::holds(&agent, &hash)
    {
        return Ok((Some(agent), Some(ToConfirm(stored, settling, Some(hash)))));
    }
    authenticate_afresh(services, &hash, dd_id).await
}

/// [`authenticate_to_confirm`] from the database alone.
async fn authenticate_afresh(services: &Services, hash: &[u8; 32], dd_id: Uuid) -> AppResult<(Option<AgentRecord>, Option<ToConfirm>)> {
    if let Some((agent, stored, settling)) = services.store.declaration_to_confirm_as(hash, dd_id).await?
        && crate::agents::holds(&agent, hash)
    {
        return Ok((Some(agent), Some(ToConfirm(stored, settling, None))));
    }
    let agent = services.store.agent_by_token_hash(hash).await?;
    Ok((agent.filter(|agent| crate::agents::holds(agent, hash)), None))
}

/// DD confirm: settles an external payment (if any) and anchors the
/// declaration. `read`: the declaration, read with the agent's
/// authentication (read here when `None`). A remembered record is anchored
/// by a write that checks its token; one that write did not take (the
/// token replaced, the record confirmed by another request) is confirmed
/// again from a fresh read, which says what became of it: 401
/// `INVALID_TOKEN` ([`AppError::TokenRefused`]) for a token no longer the
/// agent's.
pub async fn confirm(services: &Services, agent_id: Uuid, dd_id: Uuid, read: Option<ToConfirm>) -> AppResult<Confirmed> {
    let read = match read {
        Some(ToConfirm(stored, settling, Some(token))) if stored.declaration.dd_id == dd_id && stored.declaration.agent_id == agent_id => {
            // Remembered unconfirmed, with its payment reserved and no agreement.
            if stored.confirmed_at.is_none()
                && stored.agreement_id.is_none()
                && let Some(confirmed) = settle_then_anchor(services, &stored, settling, services.clock.now(), Some(&token)).await?
            {
                return Ok(confirmed);
            }
            let (agent, read) = authenticate_afresh(services, &token, dd_id).await?;
            let agent = agent.ok_or(AppError::TokenRefused)?;
            return confirm_read(services, agent.agent_id, dd_id, read.map(|ToConfirm(stored, settling, _)| (stored, settling))).await;
        }
        Some(ToConfirm(stored, settling, None)) if stored.declaration.dd_id == dd_id => Some((stored, settling)),
        _ => None,
    };
    confirm_read(services, agent_id, dd_id, read).await
}

/// [`confirm`] of a record read with its payment (or read here, `None`).
async fn confirm_read(
    services: &Services,
    agent_id: Uuid,
    dd_id: Uuid,
    read: Option<(StoredDeclaration, Option<Settling>)>,
) -> AppResult<Confirmed> {
    // The record, and its payment if it has one, in one read.
    let read = match read {
        Some(read) => Some(read),
        None => services.store.declaration_to_confirm(dd_id).await?,
    };
    let Some((stored, settling)) = read else {
        return Err(missing(services, dd_id).await?);
    };
    must_own(&stored, agent_id)?;
    if stored.confirmed_at.is_some() {
        return Err(already_confirmed());
    }
    // A bilateral proposal says why it cannot be confirmed (pending, rejected) before its payment's state does.
    if let Some(agreement_id) = stored.agreement_id {
        crate::agreements::may_confirm(services, agreement_id, &stored).await?;
    }
    if stored.settlement_status == SettlementStatus::Released {
        return Err(payment_expired());
    }
    if stored.settlement_status == SettlementStatus::Failed {
        return Err(AppError::Conflict {
            code: "PAYMENT_FAILED",
            message: "this declaration's payment failed to settle; nothing was charged and it can no longer be confirmed".into(),
        });
    }
    settle_and_anchor(services, &stored, settling, services.clock.now()).await
}

/// What anchoring a record writes: its integrity hash, its usage entries
/// (the price it was created with, by the generation that set it) and its
/// log leaf.
fn anchoring(stored: &StoredDeclaration) -> (String, Vec<UsageEntry>, Vec<u8>) {
    let hash = integrity_hash(&stored.declaration);
    let priced_by = Some(anchor_domain::records::PricedBy {
        version: stored.declaration.pricing_version.clone(),
        sha256: stored.declaration.pricing_sha256.clone(),
    });
    let mut usage = vec![UsageEntry {
        cost_component: CostComponent::BaseFee,
        source: stored.base_fee_source,
        amount: stored.base_fee,
        priced_by: priced_by.clone(),
    }];
    if stored.premium() > MilliDac::ZERO {
        usage.push(UsageEntry {
            cost_component: CostComponent::Premium,
            source: stored.premium_source,
            amount: stored.premium(),
            priced_by,
        });
    }
    let anchored_at = stored.declaration.anchored_at;
    let leaf = anchor_verify::leaf_data(&hash, &anchored_at.to_rfc3339_opts(SecondsFormat::Micros, true));
    (hash, usage, leaf)
}

/// Settles an externally paid declaration's payment (if it has one), then
/// anchors the declaration: integrity hash, usage entries and log leaf in one
/// transaction. Used by confirm and by the reconciliation job. `settling`:
/// the payment, read with the declaration (read here when `None`).
pub async fn settle_and_anchor(
    services: &Services,
    stored: &StoredDeclaration,
    settling: Option<Settling>,
    now: DateTime<Utc>,
) -> AppResult<Confirmed> {
    settle_then_anchor(services, stored, settling, now, None)
        .await?
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("a confirmation with no token to check was answered as not taken")))
}

/// [`settle_and_anchor`]; with `token` (a remembered record's, decision
/// 0088), anchored by a write that checks it, and `None` when that write
/// did not take it.
async fn settle_then_anchor(
    services: &Services,
    stored: &StoredDeclaration,
    settling: Option<Settling>,
    now: DateTime<Utc>,
    token: Option<&[u8; 32]>,
) -> AppResult<Option<Confirmed>> {
    let dd_id = stored.declaration.dd_id;
    let store = &services.store;
    let mut payment_id = None;
    let settlement = if stored.paid_externally() {
        let payment = match settling {
            Some(settling) => settling,
            None => store
                .payment_for(dd_id)
                .await?
                .map(Settling::from)
                .ok_or_else(|| AppError::not_found("DD_NOT_FOUND", "no payment row for this declaration"))?,
        };
        payment_id = Some(payment.payment_id);
        // An unknown outcome is reconciled before the window is looked at: the
        // money may already have moved.
        if payment.status != PaymentStatus::SettleUnknown && stored.payment_deadline.is_some_and(|deadline| now >= deadline) {
            store.close_payment(dd_id, SettlementStatus::Released, PaymentStatus::Released, WINDOW_EXPIRED, now).await?;
            return Err(payment_expired());
        }
        let reconciling = payment.status == PaymentStatus::SettleUnknown;
        let local = charge::local_reference(&payment.network, &payment.asset, &payment.payer, payment.payment_id);
        // Settled already, its anchoring left to a later confirm: not settled again.
        let known = match reconciling {
            true => store.payment_for(dd_id).await?.and_then(|p| p.settlement_ref),
            false => None,
        };
        let settled = match known {
            Some(reference) => Settled::Yes { reference },
            // What the payment accepted at the create is what it settles.
            None => charge::settle(services, payment.payment_id, &payment.payload, None, &local, reconciling).await,
        };
        match settled {
            Settled::Yes { reference } => {
                Some(charge::Settlement { reference, payer: payment.payer, resource: payment_resource(services, stored) })
            }
            Settled::No { reason } => {
                store.close_payment(dd_id, SettlementStatus::Failed, PaymentStatus::SettleFailed, &reason, now).await?;
                return Err(AppError::SettlementFailed { reason, payer: payment.payer });
            }
            Settled::Unknown { detail } => {
                store.mark_settlement_unknown(dd_id, &detail, now).await?;
                return Err(AppError::Unavailable {
                    code: "SETTLEMENT_PENDING",
                    message: "the settlement's outcome is not known yet; nothing was anchored; confirm again to reconcile it".into(),
                });
            }
        }
    } else {
        None
    };
    let (hash, usage, leaf) = anchoring(stored);
    let anchored_at = stored.declaration.anchored_at;
    let reference = settlement.as_ref().map(|s| s.reference.as_str());
    let write = || async {
        match token {
            Some(token) => {
                let anchoring = Anchoring { integrity_hash: &hash, now, usage: &usage, leaf_data: &leaf, settlement_ref: reference };
                store.confirm_declaration_as(token, dd_id, anchoring).await.map(|done| done.then_some(true))
            }
            None => store.confirm_declaration(dd_id, &hash, now, &usage, &leaf, reference).await.map(Some),
        }
    };
    let confirmed = match charge::with_retries(write).await {
        Ok(confirmed) => confirmed,
        // The money moved but the record did not: marked unknown with its
        // reference, the next confirm (or the reconciliation job) anchors it
        // without settling again; never failed for it.
        Err(error) => match (&settlement, payment_id) {
            (Some(settled), Some(payment_id)) => {
                return Err(charge::settled_unrecorded(services, payment_id, &settled.reference, &error).await);
            }
            _ => return Err(error.into()),
        },
    };
    // Not taken by the write that checks the token: found again afresh.
    let Some(confirmed) = confirmed else { return Ok(None) };
    if !confirmed {
        let again = store.declaration(dd_id).await?;
        return Err(match again {
            Some(s) if s.settlement_status == SettlementStatus::Released => payment_expired(),
            _ => already_confirmed(),
        });
    }
    services.metrics.declarations_confirmed.inc();
    Ok(Some(Confirmed { dd_id, anchored_at, confirmed_at: now, integrity_hash: hash, usage, settlement }))
}

/// How long after its payment window an unconfirmed record's reservation
/// is released by the service (its own confirmation releases it as soon
/// as the window has closed). An authorization accepted at the create is
/// valid at most [`charge::CONFIRM_MAX_TIMEOUT_SECS`] and a minute after it,
/// six minutes past the window: fifteen leave no settlement in flight.
pub const LAPSE_GRACE_MINUTES: i64 = 15;
/// The least time between an authorization's `validBefore` and its release.
const LAPSE_AUTHORIZATION_MARGIN_MINUTES: i64 = 5;
/// How far back a host that has not walked the deadlines yet starts.
pub const LAPSE_LOOKBACK_DAYS: i64 = 1;
// A released record's authorization has expired with margin to spare.
const _: () = assert!(
    LAPSE_GRACE_MINUTES * 60
        > (charge::CONFIRM_MAX_TIMEOUT_SECS - charge::PAYMENT_WINDOW_SECS + 60) as i64 + LAPSE_AUTHORIZATION_MARGIN_MINUTES * 60
);
/// Why a reservation whose window closed unconfirmed was released.
const WINDOW_EXPIRED: &str = "payment window expired before confirmation";
/// Records per page of the walk.
const LAPSE_PAGE: i64 = 1000;

/// Releases the reservations of externally paid declarations nobody
/// confirmed (decision 0083), walking the records in the order of their
/// payment deadlines from `walked` (where the last walk stopped) to
/// [`LAPSE_GRACE_MINUTES`] ago, `pages` pages at most: their DAB share,
/// and the base fee Trial or the premium Earned paid beside it, come back
/// without waiting for a confirmation that may never come. Returns how
/// many it released and whether the walk has further to go.
pub async fn release_lapsed(services: &Services, walked: &mut Option<DueKey>, pages: usize) -> AppResult<(usize, bool)> {
    let now = services.clock.now();
    let deadline_before = now - chrono::Duration::minutes(LAPSE_GRACE_MINUTES);
    let authorized_before = (now - chrono::Duration::minutes(LAPSE_AUTHORIZATION_MARGIN_MINUTES)).timestamp();
    let start = DueKey { deadline: now - chrono::Duration::days(LAPSE_LOOKBACK_DAYS), dd_id: Uuid::nil() };
    // Each step's future owns its store handle: a future borrowing the
    // closure would not be Send for every lifetime the job loop asks.
    let store = || services.store.clone();
    crate::paging::walk(
        walked,
        start,
        pages,
        LAPSE_PAGE,
        |due: PaymentDue| due.key,
        |after, limit| {
            let store = store();
            async move { Ok(store.payment_deadlines(after, deadline_before, limit).await?) }
        },
        |due: PaymentDue| {
            let store = store();
            async move {
                Ok(due.pending
                    && store.release_lapsed_payment(due.key.dd_id, deadline_before, authorized_before, WINDOW_EXPIRED, now).await?)
            }
        },
    )
    .await
}

/// A declaration's original, read by its agent: one read of its direct access.
#[derive(Clone, Debug)]
pub struct Original {
    pub stored: StoredDeclaration,
    /// Direct reads left after this one.
    pub remaining: i64,
}

/// GET /v1/dd/{dd_id}: the declaration as declared. Each read counts one
/// against `ee_direct_access_quota` within `ee_direct_access_period`;
/// `access_class` `ara_only` is never readable directly. Refusals do not count.
pub async fn read_original(services: &Services, agent_id: Uuid, dd_id: Uuid) -> AppResult<Original> {
    let stored = owned(services, agent_id, dd_id).await?;
    let ee = &stored.declaration.ee;
    if ee.access_class == ee::AccessClass::AraOnly {
        return Err(AppError::forbidden(
            "DIRECT_ACCESS_NOT_PERMITTED",
            "this declaration's access_class is ara_only: its original is not readable directly",
        ));
    }
    match services.store.consume_direct_read(dd_id, services.clock.now()).await? {
        DirectRead::Granted { remaining } => Ok(Original { stored, remaining }),
        DirectRead::Exhausted => Err(AppError::forbidden(
            "DIRECT_ACCESS_EXHAUSTED",
            format!("all {} direct reads of this declaration are spent; GET /v1/dd/list still shows its summary", ee.direct_access_quota),
        )),
        DirectRead::Expired => Err(AppError::forbidden(
            "DIRECT_ACCESS_EXPIRED",
            format!(
                "the direct access period ({}) of this declaration ended at {}",
                ee.direct_access_period,
                stored.direct_access_expires_at.to_rfc3339_opts(SecondsFormat::Micros, true)
            ),
        )),
    }
}

/// GET /v1/dd/list: the agent's declarations anchored from `from` to
/// `to`, newest first, one page of them (`limit` 50 by default, at most 200).
pub async fn list(
    services: &Services,
    agent_id: Uuid,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    limit: Option<i64>,
    offset: Option<i64>,
) -> AppResult<crate::paging::Page<StoredDeclaration>> {
    let crate::paging::Window { limit, offset } = crate::paging::by_offset(crate::paging::DECLARATIONS, limit, offset)?;
    let (items, total) = services.store.list_declarations(agent_id, ListFilter { from, to, limit, offset }).await?;
    Ok(crate::paging::Page { items, total, limit, offset })
}

/// Where a declaration sits in its lineage group.
#[derive(Clone, Debug)]
pub struct Lineage {
    pub declaration: StoredDeclaration,
    /// From the root down to the declaration's parent.
    pub ancestors: Vec<StoredDeclaration>,
    /// Every declaration of the group, oldest first.
    pub group: Vec<StoredDeclaration>,
    /// For each parent, its children's places in `group` (built once, so a
    /// tree of N declarations is rendered in O(N), not O(N²)).
    children: std::collections::HashMap<Uuid, Vec<usize>>,
}

impl Lineage {
    /// The group's root: the first ancestor, or the declaration itself.
    pub fn root(&self) -> &StoredDeclaration {
        self.ancestors.first().unwrap_or(&self.declaration)
    }

    /// The declarations whose parent is `dd_id`, oldest first.
    pub fn children(&self, dd_id: Uuid) -> impl Iterator<Item = &StoredDeclaration> {
        self.children.get(&dd_id).into_iter().flatten().map(|&i| &self.group[i])
    }
}

/// GET /v1/dd/{dd_id}/lineage: the declaration, its ancestors and its group.
pub async fn lineage(services: &Services, agent_id: Uuid, dd_id: Uuid) -> AppResult<Lineage> {
    let declaration = owned(services, agent_id, dd_id).await?;
    let group = services.store.lineage_group(agent_id, declaration.declaration.lineage_group_id).await?;
    let by_id: std::collections::HashMap<Uuid, usize> = group.iter().enumerate().map(|(i, s)| (s.declaration.dd_id, i)).collect();
    let mut children: std::collections::HashMap<Uuid, Vec<usize>> = std::collections::HashMap::new();
    for (i, s) in group.iter().enumerate() {
        if let Some(parent) = s.declaration.dd.parent_dd_id {
            children.entry(parent).or_default().push(i);
        }
    }
    let mut ancestors: Vec<StoredDeclaration> = Vec::new();
    let mut cursor = declaration.declaration.dd.parent_dd_id;
    while let Some(parent) = cursor.and_then(|id| by_id.get(&id)).map(|&i| &group[i]) {
        ancestors.push(parent.clone());
        cursor = parent.declaration.dd.parent_dd_id;
        if ancestors.len() > group.len() {
            break;
        }
    }
    ancestors.reverse();
    Ok(Lineage { declaration, ancestors, group, children })
}

/// GET /v1/dd/lineage-group/{group_id}: the agent's declarations of one group, oldest first.
pub async fn lineage_group(services: &Services, agent_id: Uuid, group_id: Uuid) -> AppResult<Vec<StoredDeclaration>> {
    let group = services.store.lineage_group(agent_id, group_id).await?;
    if group.is_empty() {
        return Err(AppError::not_found("NOT_FOUND", format!("you have no declaration in lineage group {group_id}")));
    }
    Ok(group)
}

/// What the evidence report of one decision shows besides the record.
#[derive(Clone, Debug)]
pub struct Evidence {
    pub stored: StoredDeclaration,
    pub generated_at: DateTime<Utc>,
    /// The record's leaf in the log, once confirmed.
    pub leaf_index: Option<i64>,
    /// The latest signed checkpoint's size.
    pub checkpoint_size: Option<i64>,
}

impl Evidence {
    /// A published checkpoint covers the record's leaf.
    pub fn covered(&self) -> bool {
        matches!((self.leaf_index, self.checkpoint_size), (Some(index), Some(size)) if index < size)
    }
}

/// A decision's evidence: the record, where it sits in the log, and whether
/// a signed checkpoint covers it. Who may read it is the caller's check.
pub async fn evidence(services: &Services, stored: StoredDeclaration) -> AppResult<Evidence> {
    let leaf_index = services.store.log_entry_for(stored.declaration.dd_id).await?.map(|(index, _)| index);
    let checkpoint_size = services.store.latest_checkpoint().await?.map(|c| c.size);
    Ok(Evidence { stored, generated_at: services.clock.now(), leaf_index, checkpoint_size })
}
