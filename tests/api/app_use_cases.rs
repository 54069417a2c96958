//! DD create and confirm driven through `anchor-app` with no HTTP at all: the
//! use cases, the charge pipeline and the typed "payment required" outcome,
//! on both backends, with a real pricing component and a local settler.

use std::sync::Arc;

use anchor_app::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use anchor_app::declarations::{self, CreateRequest, DdRequest, EeRequest, Form, TemplateRequest};
use anchor_app::requests::ProposeRequest;
use anchor_app::{AppError, Config, Services};
use anchor_domain::agents::{TRIAL_DAC, TRIAL_DAYS};
use anchor_domain::declarations::dd::*;
use anchor_domain::declarations::ee;
use anchor_domain::{Clock, ManualClock, MilliDac};
use anchor_ports::{AgentRecord, CostComponent, NewAgent, PaymentSource, PaymentStatus, Subject, SubjectDomain, UsageEntry};
use anchor_tests::*;
use anchor_x402::settlement::{Settled, Settler};
use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use anchor_tests::x402::{Scripted, Twist, pay};

both_backends!(
    the_use_cases_answer_what_rest_and_mcp_answer,
    create_and_confirm_through_the_use_cases,
    inline_payments_settle_before_the_answer,
    earned_pays_its_part_and_comes_back_when_settlement_is_refused,
    defaults_and_bounds_are_the_use_cases,
    a_payment_a_stopped_host_left_reserved_is_reconciled
);

/// A DD with what a client must name and nothing else.
fn dd_request(mode: DeclarationMode) -> DdRequest {
    DdRequest {
        unit_type: Some(UnitType::Single),
        declaration_mode: Some(mode),
        decision_type: DecisionType::InternalService,
        action_type: ActionType::Execute,
        origin_context: OriginContext::Internal,
        selection_state: Some(SelectionState::Selected),
        selection_scope: None,
        decision_at: None,
        parent_dd_id: None,
        excluded_option_count: None,
    }
}

/// A create naming a preset and nothing more: the use case fills in the rest.
fn input(preset: &str) -> CreateRequest {
    CreateRequest {
        request_id: Uuid::new_v4(),
        dd: dd_request(DeclarationMode::SelfDeclared),
        ee: EeRequest { preset: Some(preset.into()), ..Default::default() },
        continuity_parent: None,
        content_inclusion: false,
        template: None,
        premium_source: None,
        trace: None,
        form: Form::Nested,
    }
}

/// Services over a fresh store of `backend` with a manual clock, and one new agent.
async fn setup(
    backend: Backend,
    settler: Arc<dyn Settler>,
) -> (Services, Arc<dyn anchor_ports::Store>, Arc<ManualClock>, AgentRecord, Cleanup) {
    let (store, cleanup) = fresh_store(backend).await;
    let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()));
    let services: Services = anchor_app::Parts {
        store: store.clone(),
        pricing: default_pricing(),
        settler,
        clock: clock.clone(),
        config: Arc::new(Config {
            public_url: "https://anchor.test".into(),
            pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            dab_default: MilliDac::from_dac(1000),
            trial_grant: anchor_domain::agents::TRIAL_DAC,
            owners: Default::default(),
            privacy: Default::default(),
            features: Default::default(),
        }),
        tools: shared_tools(),
        metrics: Arc::new(anchor_app::metrics::Metrics::new(store.as_ref())),
        replica: Default::default(),
        switches: anchor_app::features::Switches::new(Default::default()),
        schedule: anchor_app::pricing::Schedule::new(default_pricing(), clock.clone()),
        trust: Default::default(),
    }
    .into();
    let now = clock.now();
    let agent_id = Uuid::new_v4();
    store
        .insert_agent(&NewAgent {
            agent_id,
            token_hash: [1; 32],
            recovery_hash: [2; 32],
            region_code: None,
            registered_at: now,
            trial_granted: TRIAL_DAC,
            trial_expires_at: now + chrono::Duration::days(TRIAL_DAYS),
        })
        .await
        .unwrap();
    let agent = store.agent(agent_id).await.unwrap().unwrap();
    (services, store, clock, agent, cleanup)
}

async fn create_and_confirm_through_the_use_cases(backend: Backend) {
    let (services, store, clock, agent, _cleanup) = setup(backend, Arc::new(anchor_x402::settlement::LocalSettler)).await;
    let now = clock.now();
    let agent_id = agent.agent_id;

    // Trial pays: no payment offered, none needed.
    let stored = declarations::create(&services, &agent, input("EE_basic"), Offered::None).await.unwrap();
    assert_eq!(stored.base_fee_source, PaymentSource::Trial);
    assert_eq!(stored.settlement_status.as_str(), "unreserved");
    let confirmed = declarations::confirm(&services, agent_id, stored.declaration.dd_id, None).await.unwrap();
    assert!(confirmed.settlement.is_none());
    assert!(confirmed.integrity_hash.starts_with("sha256:"));
    assert!(confirmed.usage.iter().all(|u| u.source == PaymentSource::Trial));
    let again = declarations::confirm(&services, agent_id, stored.declaration.dd_id, None).await.unwrap_err();
    assert_eq!(again.code(), "ALREADY_CONFIRMED");

    // Spend the Trial (10 + 3 x 157.5 = 482.5 of 500), then the typed challenge.
    for _ in 0..3 {
        declarations::create(&services, &agent, input("EE_high"), Offered::None).await.unwrap();
    }
    let unpaid = declarations::create(&services, &agent, input("EE_high"), Offered::None).await.unwrap_err();
    let AppError::PaymentRequired(required) = unpaid else { panic!("expected a payment required outcome, got {unpaid:?}") };
    assert_eq!(required.amount, MilliDac(157_500));
    assert_eq!(required.route, declarations::CREATE);
    assert_eq!(required.accepts, vec![PaymentSource::Trial, PaymentSource::External]);
    assert!(required.reason.is_none());
    assert!(required.description.contains("Trial holds 17.5 DAC"), "{}", required.description);
    let challenge = serde_json::to_value(required.challenge()).unwrap();
    assert_eq!(challenge["accepts"][0]["amount"], "157500");
    assert_eq!(challenge["resource"]["url"], "https://anchor.test/v1/dd/create");

    // Paid over x402: reserved at create, settled at confirm.
    let payload = pay(&challenge, now.timestamp(), Twist::default());
    let paid = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(payload.clone().into())).await.unwrap();
    assert_eq!(paid.base_fee_source, PaymentSource::External);
    assert_eq!(paid.settlement_status.as_str(), "pending");
    let confirmed = declarations::confirm(&services, agent_id, paid.declaration.dd_id, None).await.unwrap();
    let settled = confirmed.settlement.expect("settled externally");
    assert!(settled.reference.starts_with("local:0x"), "{}", settled.reference);
    assert_eq!(settled.payer, "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266");
    assert!(settled.resource.ends_with("/v1/dd/create"), "the create's resource: {}", settled.resource);

    // Refused payments: a used authorization, an expired one, a malformed header.
    let replayed = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(payload.into())).await.unwrap_err();
    let AppError::PaymentRequired(required) = replayed else { panic!("expected a challenge, got {replayed:?}") };
    assert_eq!(required.reason.as_deref(), Some("invalid_exact_evm_nonce_already_used"));
    let expired = pay(&challenge, now.timestamp(), Twist { valid_before_in: Some(-1), ..Twist::default() });
    let refused = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(expired.into())).await.unwrap_err();
    let AppError::PaymentRequired(required) = refused else { panic!("expected a challenge, got {refused:?}") };
    assert_eq!(required.reason.as_deref(), Some("invalid_exact_evm_payload_authorization_valid_before"));
    let malformed = declarations::create(&services, &agent, input("EE_high"), Offered::Malformed("not base64".into())).await.unwrap_err();
    assert_eq!(malformed.code(), "INVALID_PAYLOAD");
    // None of the refusals recorded anything: five declarations in all.
    let (_, total) = store.list_declarations(agent_id, anchor_ports::ListFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(total, 5);
}

/// Records what the pipeline asked it to, and how often.
#[derive(Default)]
struct Observe(std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Commit for Observe {
    type Output = (Uuid, String);
    async fn commit(&self, funding: Funding) -> anchor_app::AppResult<Committed<(Uuid, String)>> {
        let Funding::Settled { payment_id, settlement } = funding else { panic!("an inline route was asked to reserve") };
        self.0.lock().unwrap().push(settlement.reference.clone());
        Ok(Committed::Done((payment_id, settlement.reference)))
    }
}

/// A 1-DAC environment observation for `subject`, settled inline.
fn observation(agent_id: Uuid, subject: Subject, offered: Offered) -> Order {
    Order {
        agent_id,
        route: Route { method: "GET", path: "/v1/ara/environment" },
        path: None,
        total: MilliDac::from_dac(1),
        description: "Environment observation".into(),
        trial: TrialUse::None,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(subject),
        pending: None,
    }
}

async fn inline_payments_settle_before_the_answer(backend: Backend) {
    let settler = Scripted::new(Vec::new());
    let (services, store, clock, agent, _cleanup) = setup(backend, settler.clone()).await;
    let now = clock.now();
    let agent_id = agent.agent_id;
    let order = |subject: Subject, offered: Offered| observation(agent_id, subject, offered);
    let observe = Observe::default();
    let first = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };

    // No payment: the typed challenge, x402 only (Trial never pays this route).
    let unpaid = charge::charge(&services, order(first, Offered::None), &observe).await.unwrap_err();
    let AppError::PaymentRequired(required) = unpaid else { panic!("expected a challenge, got {unpaid:?}") };
    assert_eq!(required.accepts, vec![PaymentSource::External]);
    let challenge = serde_json::to_value(required.challenge()).unwrap();
    assert_eq!(challenge["accepts"][0]["amount"], "1000");

    // Paid: settled before the commit ran, its usage recorded with the settlement.
    let payload = pay(&challenge, now.timestamp(), Twist::default());
    let (payment_id, reference) =
        charge::charge(&services, order(first, Offered::Payload(payload.clone().into())), &observe).await.unwrap();
    assert!(reference.starts_with("local:0x"), "{reference}");
    let payment = store.payment(payment_id).await.unwrap().unwrap();
    assert_eq!(payment.status, PaymentStatus::Settled);
    assert_eq!(payment.subject, Some(first));
    assert_eq!(payment.settlement_ref.as_deref(), Some(reference.as_str()));
    let usage = store.usage_for(first).await.unwrap();
    assert_eq!(
        usage,
        vec![UsageEntry {
            cost_component: CostComponent::AraObservation,
            source: PaymentSource::External,
            amount: MilliDac(1000),
            priced_by: Some(services.priced_by()),
        }]
    );
    // The charge names the generation that priced it.
    assert_eq!(services.priced_by().sha256, services.pricing.generation().sha256);
    assert_eq!(services.priced_by().sha256.len(), 64);

    // The same authorization again, from its agent: a duplicate of the paid
    // request (decision 0082; another agent's would be a replay, 402),
    // refused before anything is written or settled.
    let second = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    let again = charge::charge(&services, order(second, Offered::Payload(payload.into())), &observe).await.unwrap_err();
    assert!(matches!(again, AppError::Conflict { code: "DUPLICATE_REQUEST", .. }), "expected a duplicate, got {again:?}");

    // Settlement refused: the payment ends, nothing is recorded, the commit never runs.
    settler.0.lock().unwrap().push(Settled::No { reason: "insufficient_funds".into() });
    let refused =
        charge::charge(&services, order(second, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()).into())), &observe)
            .await
            .unwrap_err();
    assert_eq!(refused.code(), "SETTLEMENT_FAILED");
    assert!(store.usage_for(second).await.unwrap().is_empty());

    // Outcome unknown: 503 now, settled once by the reconciliation job, usage then.
    let third = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    settler.0.lock().unwrap().push(Settled::Unknown { detail: "facilitator timed out".into() });
    let pending =
        charge::charge(&services, order(third, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()).into())), &observe)
            .await
            .unwrap_err();
    assert_eq!(pending.code(), "SETTLEMENT_PENDING");
    assert!(store.usage_for(third).await.unwrap().is_empty());
    let unknown = store.unknown_settlements(10).await.unwrap();
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].subject, third);
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&services).await.unwrap(), 1);
    assert_eq!(store.payment(unknown[0].payment_id).await.unwrap().unwrap().status, PaymentStatus::Settled);
    assert_eq!(store.usage_for(third).await.unwrap().len(), 1);
    assert!(store.unknown_settlements(10).await.unwrap().is_empty());

    // The commit ran exactly once: for the one payment that settled at once.
    assert_eq!(observe.0.lock().unwrap().len(), 1);
    // Reserved and settled payments count against the DAB; the refused one does not.
    let (period_start, _) = anchor_domain::dab::period(now);
    assert_eq!(store.dab_status(agent_id, period_start).await.unwrap().spent, MilliDac(2000));
}

/// A settler whose next settlements never answer while `stopped` holds
/// (their host stops while they wait), then the scripted outcomes.
struct Stopping {
    stopped: std::sync::atomic::AtomicBool,
    then: Arc<Scripted>,
}

#[async_trait::async_trait]
impl Settler for Stopping {
    fn mode(&self) -> &'static str {
        "scripted"
    }
    async fn verify(&self, payload: &serde_json::Value, requirements: &serde_json::Value) -> Result<(), String> {
        self.then.verify(payload, requirements).await
    }
    async fn settle(&self, payload: &str, requirements: Option<&serde_json::Value>, local: &str) -> Settled {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.then.settle(payload, requirements, local).await
    }
}

/// The challenge an unpaid order answers.
async fn challenge_of(services: &Services, order: Order, observe: &Observe) -> serde_json::Value {
    let AppError::PaymentRequired(required) = charge::charge(services, order, observe).await.unwrap_err() else { panic!("a challenge") };
    serde_json::to_value(required.challenge()).unwrap()
}

/// Decision 0084: a host that stops between reserving an inline payment and
/// settling it (its request's future dropped mid-settlement, as a killed
/// process leaves it) leaves the payment reserved. Ten minutes after its
/// authorization ended the job marks it unknown and the reconciliation
/// settles it again: charged once where the money had moved (the nonce is
/// used), ended and taken out of the DAB where it had not. Payments settled
/// in time, and reserved ones whose authorization still runs, are left alone.
async fn a_payment_a_stopped_host_left_reserved_is_reconciled(backend: Backend) {
    let scripted = Scripted::new(Vec::new());
    let settler = Arc::new(Stopping { stopped: true.into(), then: scripted.clone() });
    let (services, store, clock, agent, _cleanup) = setup(backend, settler.clone()).await;
    let agent_id = agent.agent_id;
    let order = |subject: Subject, offered: Offered| observation(agent_id, subject, offered);
    let observe = Observe::default();
    let subject = || Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    let (moved, unmoved, settled) = (subject(), subject(), subject());
    // Two requests whose host stops while they settle.
    for s in [moved, unmoved] {
        let paid = pay(&challenge_of(&services, order(s, Offered::None), &observe).await, clock.now().timestamp(), Twist::default());
        let stopped = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            charge::charge(&services, order(s, Offered::Payload(paid.into())), &observe),
        )
        .await;
        assert!(stopped.is_err(), "the settlement never answered");
    }
    settler.stopped.store(false, std::sync::atomic::Ordering::SeqCst);
    let paid = pay(&challenge_of(&services, order(settled, Offered::None), &observe).await, clock.now().timestamp(), Twist::default());
    let (settled_id, _) = charge::charge(&services, order(settled, Offered::Payload(paid.into())), &observe).await.unwrap();
    let status = |id: Uuid| {
        let store = store.clone();
        async move { store.payment(id).await.unwrap().unwrap().status }
    };
    // The two left reserved count against the DAB, beside the settled one.
    let (period_start, _) = anchor_domain::dab::period(clock.now());
    assert_eq!(store.dab_status(agent_id, period_start).await.unwrap().spent, MilliDac(3000));
    assert!(store.unknown_settlements(10).await.unwrap().is_empty());

    // Their authorizations (35 minutes) still run, then ended less than ten minutes ago: nothing to do.
    let mut walked = None;
    assert_eq!(charge::mark_abandoned(&services, &mut walked, 4).await.unwrap(), (0, false));
    clock.advance(chrono::Duration::minutes(44));
    assert_eq!(charge::mark_abandoned(&services, &mut walked, 4).await.unwrap(), (0, false));
    clock.advance(chrono::Duration::minutes(2));
    assert_eq!(charge::mark_abandoned(&services, &mut walked, 4).await.unwrap(), (2, false));
    assert_eq!(charge::mark_abandoned(&services, &mut walked, 4).await.unwrap(), (0, false), "once");
    let mut unknown = store.unknown_settlements(10).await.unwrap();
    unknown.sort_by_key(|u| u.subject != moved);
    assert_eq!(unknown.iter().map(|u| u.subject).collect::<Vec<_>>(), vec![moved, unmoved]);
    let (moved_id, unmoved_id) = (unknown[0].payment_id, unknown[1].payment_id);
    assert_eq!(status(settled_id).await, PaymentStatus::Settled, "a payment settled in time is left as it is");

    // Settled again: the first had moved (its nonce is used), the second had not (its authorization expired).
    let script = |id: Uuid| {
        if id == moved_id {
            Settled::No { reason: anchor_x402::settlement::NONCE_USED.into() }
        } else {
            Settled::No { reason: "invalid_exact_evm_payload_authorization_valid_before".into() }
        }
    };
    // The reconciliation takes them oldest first; the script is popped from its end.
    let order_taken: Vec<Uuid> = store.unknown_settlements(10).await.unwrap().iter().map(|u| u.payment_id).collect();
    scripted.0.lock().unwrap().extend(order_taken.iter().rev().map(|id| script(*id)));
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&services).await.unwrap(), 2);
    assert_eq!(status(moved_id).await, PaymentStatus::Settled);
    assert_eq!(store.usage_for(moved).await.unwrap().len(), 1, "charged once");
    assert_eq!(status(unmoved_id).await, PaymentStatus::SettleFailed);
    assert!(store.usage_for(unmoved).await.unwrap().is_empty());
    assert_eq!(store.dab_status(agent_id, period_start).await.unwrap().spent, MilliDac(2000), "the unmoved one left the DAB");
}

/// An order whose surcharge Earned DAC pays: debited with the reservation
/// (the challenge asks for the rest only), recorded as usage with the
/// settlement, given back into the same lots when settlement is refused, held
/// while the outcome is unknown; and refused before any challenge when the
/// balance cannot pay.
async fn earned_pays_its_part_and_comes_back_when_settlement_is_refused(backend: Backend) {
    let settler = Scripted::new(Vec::new());
    let (services, store, clock, agent, _cleanup) = setup(backend, settler.clone()).await;
    let now = clock.now();
    let agent_id = agent.agent_id;
    store.credit_earned(agent_id, MilliDac::from_dac(40), "tool sale", None, now + chrono::Duration::days(365), now).await.unwrap();
    let balance = || async { store.earned_balance(agent_id, clock.now()).await.unwrap().balance };
    let route = Route { method: "GET", path: "/v1/ara/agent/{agent_id}/profile" };
    let order = |agent_id: Uuid, subject: Subject, offered: Offered| Order {
        agent_id,
        route,
        path: None,
        total: MilliDac::from_dac(5),
        description: "Profile of another agent at resolution level 2".into(),
        trial: TrialUse::None,
        earned: MilliDac::from_dac(2),
        offered,
        settle: Settle::Inline(subject),
        pending: None,
    };
    let observe = Observe::default();
    let subject = || Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };

    // The challenge asks for the base alone; nothing is debited for asking.
    let first = subject();
    let unpaid = charge::charge(&services, order(agent_id, first, Offered::None), &observe).await.unwrap_err();
    let AppError::PaymentRequired(required) = unpaid else { panic!("expected a challenge, got {unpaid:?}") };
    let challenge = serde_json::to_value(required.challenge()).unwrap();
    assert_eq!(challenge["accepts"][0]["amount"], "3000");
    assert_eq!(balance().await, MilliDac::from_dac(40));
    let paid = || Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()).into());

    // Paid: 3 over x402 and 2 from Earned, both usage of the one subject.
    charge::charge(&services, order(agent_id, first, paid()), &observe).await.unwrap();
    let mut usage = store.usage_for(first).await.unwrap();
    usage.sort_by_key(|u| u.source.as_str());
    assert_eq!(
        usage,
        vec![
            UsageEntry {
                cost_component: CostComponent::AraObservation,
                source: PaymentSource::Earned,
                amount: MilliDac::from_dac(2),
                priced_by: Some(services.priced_by()),
            },
            UsageEntry {
                cost_component: CostComponent::AraObservation,
                source: PaymentSource::External,
                amount: MilliDac::from_dac(3),
                priced_by: Some(services.priced_by()),
            },
        ]
    );
    assert_eq!(balance().await, MilliDac::from_dac(38));

    // Settlement refused: the 2 come back, nothing is used.
    let second = subject();
    settler.0.lock().unwrap().push(Settled::No { reason: "insufficient_funds".into() });
    let refused = charge::charge(&services, order(agent_id, second, paid()), &observe).await.unwrap_err();
    assert_eq!(refused.code(), "SETTLEMENT_FAILED");
    assert!(store.usage_for(second).await.unwrap().is_empty());
    assert_eq!(balance().await, MilliDac::from_dac(38));
    let ledger = store.earned_ledger(agent_id, 2, 0).await.unwrap();
    assert_eq!((ledger[0].kind, ledger[1].kind), (anchor_domain::earned::EntryKind::Refund, anchor_domain::earned::EntryKind::Debit));
    assert_eq!(ledger[0].reference, Some(second));

    // Outcome unknown: the 2 stay debited until the job settles it; then they are usage.
    let third = subject();
    settler.0.lock().unwrap().push(Settled::Unknown { detail: "facilitator timed out".into() });
    let pending = charge::charge(&services, order(agent_id, third, paid()), &observe).await.unwrap_err();
    assert_eq!(pending.code(), "SETTLEMENT_PENDING");
    assert_eq!(balance().await, MilliDac::from_dac(36));
    assert_eq!(anchor_app::jobs::reconcile_unknown_settlements(&services).await.unwrap(), 1);
    assert_eq!(store.usage_for(third).await.unwrap().len(), 2);
    assert_eq!(balance().await, MilliDac::from_dac(36));
    // DAB counts the external parts only: 3 settled, 3 reconciled.
    let (period_start, _) = anchor_domain::dab::period(now);
    assert_eq!(store.dab_status(agent_id, period_start).await.unwrap().spent, MilliDac::from_dac(6));

    // An agent without Earned DAC is refused before any challenge, and pays nothing.
    let poor = NewAgent {
        agent_id: Uuid::new_v4(),
        token_hash: [7; 32],
        recovery_hash: [8; 32],
        region_code: None,
        registered_at: now,
        trial_granted: MilliDac::ZERO,
        trial_expires_at: now,
    };
    store.insert_agent(&poor).await.unwrap();
    let short = charge::charge(&services, order(poor.agent_id, subject(), Offered::None), &observe).await.unwrap_err();
    assert_eq!(short.code(), "INSUFFICIENT_DAC");
    // Below the threshold counts as short too, even when the part would fit.
    store.credit_earned(poor.agent_id, MilliDac::from_dac(29), "tool sale", None, now + chrono::Duration::days(365), now).await.unwrap();
    let short = charge::charge(&services, order(poor.agent_id, subject(), Offered::None), &observe).await.unwrap_err();
    assert_eq!(short.code(), "INSUFFICIENT_DAC");
}

/// Defaults and bounds a client leaves to the service are applied by the
/// use case, and its result says which it used: a registration's region,
/// a usage page's number and size.
async fn defaults_and_bounds_are_the_use_cases(backend: Backend) {
    let (services, _store, _clock, agent, _cleanup) = setup(backend, Arc::new(anchor_x402::settlement::LocalSettler)).await;
    let Err(refused) = anchor_app::agents::register(&services, Some("MARS")).await else { panic!("an unknown region is refused") };
    assert_eq!(refused.code(), "INVALID_ENUM");
    assert!(anchor_app::agents::register(&services, Some("KR")).await.is_ok());
    assert!(anchor_app::agents::register(&services, None).await.is_ok());

    let range = anchor_app::dur::range(&services, None, None).unwrap();
    let agents = [agent.agent_id];
    let usage = |page, limit| anchor_app::dur::transactions(&services, &agents, range, None, page, limit);
    let first = usage(None, None).await.unwrap();
    assert_eq!((first.page(), first.limit), (1, anchor_app::paging::USAGE.default), "page 1 of the default size");
    let capped = usage(Some(3), Some(10_000)).await.unwrap();
    assert_eq!((capped.page(), capped.limit), (3, anchor_app::paging::USAGE.max), "a size past the largest is the largest");
    assert_eq!(usage(Some(0), None).await.unwrap_err().code(), "INVALID_VALUE");
    assert_eq!(usage(None, Some(0)).await.unwrap_err().code(), "INVALID_VALUE");
    let sales = anchor_app::dur::tsl(&services, agent.agent_id, range, "all", None, Some(7)).await.unwrap();
    assert_eq!((sales.page(), sales.limit, sales.total), (1, 7, 0));
}

/// One request as a client writes it: the JSON REST takes (and, flattened,
/// the MCP tool's arguments), and the same fields given to the use case,
/// once in each of the interface's two forms.
struct Case {
    name: &'static str,
    /// The error_code REST refuses it with, or `None`: it is recorded.
    expect: Option<&'static str>,
    /// What the MCP tool answers.
    over_mcp: OverMcp,
    dd: serde_json::Value,
    ee: serde_json::Value,
    /// Top-level fields beside dd and ee (continuity, content_inclusion_flag, template).
    extra: serde_json::Value,
    request: fn(DateTime<Utc>, Uuid) -> DdAndEe,
}

/// What a case's flat arguments get from the MCP tool.
#[derive(Clone, Copy, Debug)]
enum OverMcp {
    /// What REST answers: the flat form reads it as the nested one does.
    AsRest,
    /// Recorded, where REST refuses: the flat form's defaults fill what the
    /// nested form requires.
    Defaulted,
    /// Refused before any use case runs: the reference tool has no such
    /// argument (the MCP envelope's invalid params, with REST's code).
    NoArgument(&'static str),
}

#[derive(Clone)]
struct DdAndEe {
    dd: DdRequest,
    ee: EeRequest,
    continuity_parent: Option<Uuid>,
    content_inclusion: bool,
    template: Option<TemplateRequest>,
}

fn plain(dd: DdRequest, ee: EeRequest) -> DdAndEe {
    DdAndEe { dd, ee, continuity_parent: None, content_inclusion: false, template: None }
}

fn basic_dd_json(mode: &str) -> serde_json::Value {
    serde_json::json!({
        "dd_unit_type": "single", "dd_declaration_mode": mode, "decision_type": "internal_service",
        "decision_action_type": "execute", "origin_context_type": "internal", "selection_state": "SELECTED",
    })
}

fn with(mut value: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    value
}

fn axes(retention: ee::Retention, integrity: ee::Integrity, disclosure: ee::Disclosure, responsibility: ee::Responsibility) -> EeRequest {
    EeRequest {
        retention: Some(retention),
        integrity: Some(integrity),
        disclosure: Some(disclosure),
        responsibility: Some(responsibility),
        ..Default::default()
    }
}

/// What the three ways answered, made comparable: the record's declared
/// fields, resolved EE (defaults filled in), template and price; or the
/// refusal's status and error_code.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Recorded(String),
    Refused(u16, String),
}

/// A use case's refusal: its own code, and the status the server maps it to.
fn refusal(error: AppError) -> Outcome {
    let code = error.code().to_string();
    Outcome::Refused(anchor_server::error::ApiError::App(error).status().as_u16(), code)
}

async fn recorded(t: &TestServer, dd_id: &str) -> Outcome {
    let stored = t.store.declaration(dd_id.parse().unwrap()).await.unwrap().expect("the record is stored");
    let d = &stored.declaration;
    Outcome::Recorded(format!("{:?} {:?} {:?} {} {}", d.dd, d.ee, d.template, d.content_inclusion, d.dac_amount))
}

async fn the_use_cases_answer_what_rest_and_mcp_answer(backend: Backend) {
    use serde_json::json;
    let t = TestServer::start(backend).await;
    let now = t.clock.now();
    let (rest, mcp, app) = (t.register().await, t.register().await, t.register().await);
    let app_agent = t.store.agent(app.id.parse().unwrap()).await.unwrap().unwrap();
    // The flat form's calls are another agent's, so that each agent pays as
    // much Trial DAC as the REST and MCP agents do.
    let flat_agent = t.register().await;
    let flat_agent = t.store.agent(flat_agent.id.parse().unwrap()).await.unwrap().unwrap();
    let later = (now + chrono::Duration::hours(1)).to_rfc3339();
    let cases = vec![
        Case {
            name: "a preset and nothing else: every default filled in",
            expect: None,
            dd: basic_dd_json("self_declared"),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({}),
            over_mcp: OverMcp::AsRest,
            request: |_, _| {
                plain(dd_request(DeclarationMode::SelfDeclared), EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
        Case {
            name: "only what the flat form requires: a unit, a selection state and a mode left out",
            expect: Some("MISSING_FIELD"),
            dd: json!({ "decision_type": "internal_service", "decision_action_type": "execute", "origin_context_type": "internal" }),
            ee: json!({}),
            extra: json!({}),
            over_mcp: OverMcp::Defaulted,
            request: |_, _| {
                let mut dd = dd_request(DeclarationMode::SelfDeclared);
                (dd.unit_type, dd.declaration_mode, dd.selection_state) = (None, None, None);
                plain(dd, EeRequest::default())
            },
        },
        Case {
            name: "options left out, counted",
            expect: None,
            dd: with(basic_dd_json("self_declared"), json!({ "excluded_option_count": 4 })),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({}),
            over_mcp: OverMcp::NoArgument("excluded_option_count"),
            request: |_, _| {
                let mut dd = dd_request(DeclarationMode::SelfDeclared);
                dd.excluded_option_count = Some(4);
                plain(dd, EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
        Case {
            name: "four axes, an access period and quota, a scope and a class",
            expect: None,
            dd: with(basic_dd_json("self_declared"), json!({ "selection_scope": "multi_target" })),
            ee: json!({
                "ee_retention_period": "long", "ee_integrity_verification_level": "enhanced", "ee_disclosure_format_policy": "internal",
                "ee_responsibility_scope": "extended", "ee_direct_access_period": "12m", "ee_direct_access_quota": 7,
                "content_disclosure_scope": "public", "delegation_state": "partial", "access_class": "self_direct",
            }),
            extra: json!({}),
            over_mcp: OverMcp::AsRest,
            request: |_, _| {
                let mut dd = dd_request(DeclarationMode::SelfDeclared);
                dd.selection_scope = Some(SelectionScope::MultiTarget);
                let mut ee = axes(ee::Retention::Long, ee::Integrity::Enhanced, ee::Disclosure::Internal, ee::Responsibility::Extended);
                ee.direct_access_period = Some("12m".into());
                ee.direct_access_quota = Some(7);
                ee.content_scope = Some(ee::ContentScope::Public);
                ee.delegation = Some(ee::Delegation::Partial);
                ee.access_class = Some(ee::AccessClass::SelfDirect);
                plain(dd, ee)
            },
        },
        Case {
            name: "a template with content inclusion",
            expect: None,
            dd: basic_dd_json("self_declared"),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({ "content_inclusion_flag": 1, "template": { "decision_scale_value": 12.50, "decision_scale_unit": "USD" } }),
            over_mcp: OverMcp::AsRest,
            request: |_, _| DdAndEe {
                content_inclusion: true,
                template: Some(TemplateRequest {
                    decision_scale_value: Some("12.5".into()),
                    decision_scale_unit: Some("USD".into()),
                    ..Default::default()
                }),
                ..plain(dd_request(DeclarationMode::SelfDeclared), EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
        Case {
            name: "content inclusion without a template",
            expect: Some("MISSING_FIELD"),
            dd: basic_dd_json("self_declared"),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({ "content_inclusion_flag": 1 }),
            over_mcp: OverMcp::AsRest,
            request: |_, _| DdAndEe {
                content_inclusion: true,
                ..plain(dd_request(DeclarationMode::SelfDeclared), EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
        Case {
            name: "a decision dated after its anchoring",
            expect: Some("DECISION_AT_IN_FUTURE"),
            dd: with(basic_dd_json("self_declared"), json!({ "decision_at": later })),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({}),
            over_mcp: OverMcp::AsRest,
            request: |now, _| {
                let mut dd = dd_request(DeclarationMode::SelfDeclared);
                dd.decision_at = Some(now + chrono::Duration::hours(1));
                plain(dd, EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
        Case {
            name: "two different parents",
            expect: Some("INVALID_VALUE"),
            dd: with(basic_dd_json("self_declared"), json!({ "parent_dd_id": Uuid::nil() })),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({ "continuity": { "parent_dd_id": Uuid::max() } }),
            over_mcp: OverMcp::NoArgument("continuity"),
            request: |_, _| {
                let mut dd = dd_request(DeclarationMode::SelfDeclared);
                dd.parent_dd_id = Some(Uuid::nil());
                DdAndEe {
                    continuity_parent: Some(Uuid::max()),
                    ..plain(dd, EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
                }
            },
        },
        Case {
            name: "a quota past its bound",
            expect: Some("INVALID_VALUE"),
            dd: basic_dd_json("self_declared"),
            ee: json!({ "ee_preset": "EE_basic", "ee_direct_access_quota": 1_000_001 }),
            extra: json!({}),
            over_mcp: OverMcp::AsRest,
            request: |_, _| {
                plain(
                    dd_request(DeclarationMode::SelfDeclared),
                    EeRequest { preset: Some("EE_basic".into()), direct_access_quota: Some(1_000_001), ..Default::default() },
                )
            },
        },
        Case {
            name: "an axis missing without a preset",
            expect: Some("MISSING_FIELD"),
            dd: basic_dd_json("self_declared"),
            ee: json!({ "ee_retention_period": "short", "ee_integrity_verification_level": "basic", "ee_disclosure_format_policy": "internal" }),
            extra: json!({}),
            over_mcp: OverMcp::Defaulted,
            request: |_, _| {
                let mut ee = axes(ee::Retention::Short, ee::Integrity::Basic, ee::Disclosure::Internal, ee::Responsibility::Minimal);
                ee.responsibility = None;
                plain(dd_request(DeclarationMode::SelfDeclared), ee)
            },
        },
        Case {
            name: "a bilateral DD on the create route",
            expect: Some("DECLARATION_MODE_NOT_ALLOWED"),
            dd: basic_dd_json("bilateral"),
            ee: json!({ "ee_preset": "EE_basic" }),
            extra: json!({}),
            over_mcp: OverMcp::NoArgument("dd_declaration_mode"),
            request: |_, _| {
                plain(dd_request(DeclarationMode::Bilateral), EeRequest { preset: Some("EE_basic".into()), ..Default::default() })
            },
        },
    ];
    let mut flat_records = Vec::new();
    for case in &cases {
        let request_id = Uuid::new_v4();
        let body = with(json!({ "request_id": request_id, "dd": case.dd, "ee": case.ee }), case.extra.clone());
        let over_rest = t.post("/v1/dd/create", Some(&rest.token), &body).await;
        let over_rest = match over_rest.status.as_u16() {
            201 => recorded(&t, over_rest.json["dd_id"].as_str().unwrap()).await,
            status => Outcome::Refused(status, over_rest.json["error_code"].as_str().unwrap_or_default().to_string()),
        };
        let parts = (case.request)(now, request_id);
        let request = |form: Form| CreateRequest {
            request_id: Uuid::new_v4(),
            dd: parts.dd.clone(),
            ee: parts.ee.clone(),
            continuity_parent: parts.continuity_parent,
            content_inclusion: parts.content_inclusion,
            template: parts.template.clone(),
            premium_source: None,
            trace: None,
            form,
        };
        let mut through_app = Vec::new();
        for (form, agent) in [(Form::Nested, &app_agent), (Form::Flat, &flat_agent)] {
            through_app.push(match declarations::create(&t.state.app, agent, request(form), Offered::None).await {
                Ok(stored) => recorded(&t, &stored.declaration.dd_id.to_string()).await,
                Err(error) => refusal(error),
            });
        }
        let [nested, flat] = <[Outcome; 2]>::try_from(through_app).unwrap();
        match (&over_rest, case.expect) {
            (Outcome::Recorded(_), None) => {}
            (Outcome::Refused(400, code), Some(expected)) if code == expected => {}
            (other, _) => panic!("{}: REST answered {other:?}, expected {:?}", case.name, case.expect),
        }
        assert_eq!(nested, over_rest, "{}: the use case answers what REST answers", case.name);

        let mut arguments = flat_arguments(&case.dd, &case.ee, "self_declared");
        arguments.extend(case.extra.as_object().unwrap().clone());
        arguments.insert("auth_token".into(), json!(mcp.token));
        let over_mcp = mcp_outcome(&t, "create_decision", arguments).await;
        assert_over_mcp(case.name, case.over_mcp, &over_mcp, &nested, &flat);
        if let OverMcp::Defaulted = case.over_mcp {
            assert!(matches!(flat, Outcome::Recorded(_)), "{}: the flat form fills in what REST requires: {flat:?}", case.name);
            flat_records.push(flat);
        }
    }
    // The flat form's defaults are values a nested request can name: the
    // record made with them left out equals one made with them written.
    let written = json!({ "ee_retention_period": "medium", "ee_integrity_verification_level": "basic",
        "ee_disclosure_format_policy": "internal", "ee_responsibility_scope": "standard" });
    let full = json!({ "request_id": Uuid::new_v4(), "dd": basic_dd_json("self_declared"), "ee": written });
    let full = t.post("/v1/dd/create", Some(&rest.token), &full).await;
    let full = recorded(&t, full.json["dd_id"].as_str().unwrap()).await;
    assert_eq!(flat_records[0], full, "left out, the unit, the selection state, the mode and the axes are the flat schema's defaults");
    // The refusals are the use case's own codes, not a server's.
    let mut future = input("EE_basic");
    future.dd.decision_at = Some(now + chrono::Duration::hours(1));
    assert_eq!(declarations::create(&t.state.app, &app_agent, future, Offered::None).await.unwrap_err().code(), "DECISION_AT_IN_FUTURE");

    // Bilateral proposals: the same three ways.
    let counterparty = t.register().await;
    let four_axes = || json!({ "ee_retention_period": "medium", "ee_integrity_verification_level": "basic", "ee_disclosure_format_policy": "internal", "ee_responsibility_scope": "standard" });
    let typed_axes = || axes(ee::Retention::Medium, ee::Integrity::Basic, ee::Disclosure::Internal, ee::Responsibility::Standard);
    let mut left_out = dd_request(DeclarationMode::Bilateral);
    (left_out.unit_type, left_out.declaration_mode, left_out.selection_state) = (None, None, None);
    let proposals: Vec<(&str, serde_json::Value, serde_json::Value, DdRequest, EeRequest, OverMcp)> = vec![
        (
            "a proposal with its four axes",
            basic_dd_json("bilateral"),
            four_axes(),
            dd_request(DeclarationMode::Bilateral),
            typed_axes(),
            OverMcp::AsRest,
        ),
        (
            "a proposal naming a preset",
            basic_dd_json("bilateral"),
            json!({ "ee_preset": "EE_basic" }),
            dd_request(DeclarationMode::Bilateral),
            EeRequest { preset: Some("EE_basic".into()), ..Default::default() },
            OverMcp::AsRest,
        ),
        (
            "a self-declared DD proposed",
            basic_dd_json("self_declared"),
            four_axes(),
            dd_request(DeclarationMode::SelfDeclared),
            typed_axes(),
            OverMcp::NoArgument("dd_declaration_mode"),
        ),
        (
            "a proposal leaving out what the flat form defaults",
            json!({ "decision_type": "internal_service", "decision_action_type": "execute", "origin_context_type": "internal" }),
            json!({}),
            left_out,
            EeRequest::default(),
            OverMcp::Defaulted,
        ),
    ];
    let mut priced_in_full = None;
    for (name, dd, ee_json, dd_typed, ee_typed, over_mcp_expected) in proposals {
        let body = json!({ "counterparty_agent_id": counterparty.id, "dd": dd, "ee": ee_json });
        let over_rest = t.post("/v1/dd/bilateral/propose", Some(&rest.token), &body).await;
        // Bilateral proposals are paid over x402 alone: a valid one is answered with its price.
        let rest_outcome = match over_rest.status.as_u16() {
            402 => Outcome::Refused(402, over_rest.json["accepts"][0]["amount"].as_str().unwrap().to_string()),
            status => Outcome::Refused(status, over_rest.json["error_code"].as_str().unwrap_or_default().to_string()),
        };
        if priced_in_full.is_none() {
            priced_in_full = Some(rest_outcome.clone());
        }
        let mut through_app = Vec::new();
        for form in [Form::Nested, Form::Flat] {
            let request = ProposeRequest {
                request_id: None,
                counterparty_agent_id: counterparty.id.parse().unwrap(),
                dd: dd_typed.clone(),
                ee: ee_typed.clone(),
                continuity_parent: None,
                form,
            };
            let agent = if form == Form::Flat { &flat_agent } else { &app_agent };
            through_app.push(match anchor_app::bilateral::propose(&t.state.app, agent, request, Offered::None).await {
                Ok(_) => panic!("{name}: a proposal with no payment is recorded"),
                Err(AppError::PaymentRequired(required)) => Outcome::Refused(402, required.amount.usdc_base_units().to_string()),
                Err(error) => refusal(error),
            });
        }
        let [nested, flat] = <[Outcome; 2]>::try_from(through_app).unwrap();
        let expected = match name {
            "a proposal with its four axes" => 402,
            _ => 400,
        };
        assert!(matches!(&rest_outcome, Outcome::Refused(status, _) if *status == expected), "{name}: {rest_outcome:?}");
        assert_eq!(nested, rest_outcome, "{name}: the use case answers what REST answers");

        let mut arguments = flat_arguments(&dd, &ee_json, "bilateral");
        arguments.insert("counterparty_agent_id".into(), json!(counterparty.id));
        arguments.insert("auth_token".into(), json!(mcp.token));
        let over_mcp = mcp_outcome(&t, "propose_bilateral", arguments).await;
        assert_over_mcp(name, over_mcp_expected, &over_mcp, &nested, &flat);
        if let OverMcp::Defaulted = over_mcp_expected {
            assert!(matches!(&flat, Outcome::Refused(402, _)), "{name}: the flat form fills in what REST requires: {flat:?}");
            assert_eq!(Some(flat), priced_in_full, "{name}: the defaults are the four axes written out");
        }
    }
}

/// What the MCP tool answered, against what the use case answered in each
/// form (the nested one being REST's answer, checked before).
fn assert_over_mcp(name: &str, expected: OverMcp, over_mcp: &Outcome, nested: &Outcome, flat: &Outcome) {
    match expected {
        OverMcp::AsRest => {
            assert_eq!(flat, nested, "{name}: the flat form reads it as the nested one");
            assert_eq!(over_mcp, flat, "{name}: the MCP tool answers what the use case and REST answer");
        }
        OverMcp::Defaulted => assert_eq!(over_mcp, flat, "{name}: the MCP tool answers what the use case answers in the flat form"),
        OverMcp::NoArgument(argument) => {
            assert_eq!(over_mcp, &Outcome::Refused(400, "UNKNOWN_FIELD".into()), "{name}: the tool has no argument {argument}");
        }
    }
}

/// A nested dd and ee as the flat arguments of an MCP tool: their fields
/// side by side, the declaration mode left to the tool (`mode`) when it is
/// the tool's own.
fn flat_arguments(dd: &serde_json::Value, ee: &serde_json::Value, mode: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut arguments = dd.as_object().unwrap().clone();
    if arguments.get("dd_declaration_mode").is_some_and(|m| m == mode) {
        arguments.remove("dd_declaration_mode");
    }
    arguments.extend(ee.as_object().unwrap().clone());
    arguments
}

/// What an MCP tool call answered: recorded, its tool error (status and
/// error_code; a payment required as its price), or the envelope's invalid
/// params with the error_code it names (REST's 400).
async fn mcp_outcome(t: &TestServer, name: &str, arguments: serde_json::Map<String, serde_json::Value>) -> Outcome {
    let answer = mcp_call(t, name, serde_json::Value::Object(arguments)).await;
    if let Some(error) = answer.get("error") {
        assert_eq!(error["code"], -32602, "{name}: {answer}");
        return Outcome::Refused(400, error["data"]["error_code"].as_str().expect("the refusal names its error_code").to_string());
    }
    let result = &answer["result"];
    let content = &result["structuredContent"];
    match result["isError"] == serde_json::json!(true) {
        false => recorded(t, content["dd_id"].as_str().unwrap()).await,
        true if content["status"] == 402 => {
            Outcome::Refused(402, content["payment_required"]["accepts"][0]["amount"].as_str().unwrap().to_string())
        }
        true => Outcome::Refused(content["status"].as_u64().unwrap() as u16, content["error_code"].as_str().unwrap().to_string()),
    }
}

/// One MCP tool call, its whole JSON-RPC answer.
async fn mcp_call(t: &TestServer, name: &str, arguments: serde_json::Value) -> serde_json::Value {
    let reply = t
        .http
        .post(t.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } }))
        .send()
        .await
        .expect("mcp request");
    assert_eq!(reply.status().as_u16(), 200);
    reply.json().await.expect("JSON-RPC answer")
}
