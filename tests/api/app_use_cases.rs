//! DD create and confirm driven through `anchor-app` with no HTTP at all: the
//! use cases, the charge pipeline and the typed "payment required" outcome,
//! on both backends, with a real pricing component and a local settler.

use std::sync::Arc;

use anchor_app::charge::{self, Commit, Committed, Funding, Offered, Order, Route, Settle, TrialUse};
use anchor_app::declarations::{self, CreateInput, EeInput};
use anchor_app::{AppError, Config, Services};
use anchor_domain::agents::{TRIAL_DAC, TRIAL_DAYS};
use anchor_domain::declarations::dd::*;
use anchor_domain::declarations::ee;
use anchor_domain::{Clock, ManualClock, MilliDac};
use anchor_store::{AgentRecord, CostComponent, NewAgent, PaymentSource, PaymentStatus, Subject, SubjectDomain, UsageEntry};
use anchor_tests::*;
use anchor_x402::settlement::{Settled, Settler};
use chrono::{TimeZone, Utc};
use uuid::Uuid;

use anchor_tests::x402::{Scripted, Twist, pay};

both_backends!(
    create_and_confirm_through_the_use_cases,
    inline_payments_settle_before_the_answer,
    earned_pays_its_part_and_comes_back_when_settlement_is_refused
);

fn input(preset: &str) -> CreateInput {
    CreateInput {
        request_id: Uuid::new_v4(),
        dd: DdFields::BASIC,
        ee: EeInput {
            preset: Some(preset.into()),
            retention: None,
            integrity: None,
            disclosure: None,
            responsibility: None,
            content_scope: ee::ContentScope::Owner,
            delegation: ee::Delegation::None,
            period: ee::DEFAULT_ACCESS_PERIOD,
            quota: ee::DEFAULT_ACCESS_QUOTA,
            access_class: ee::AccessClass::SelfDirect,
        },
        content_inclusion: false,
        template: None,
        premium_source: None,
    }
}

/// Services over a fresh store of `backend` with a manual clock, and one new agent.
async fn setup(backend: Backend, settler: Arc<dyn Settler>) -> (Services, Arc<ManualClock>, AgentRecord, Cleanup) {
    let (store, cleanup) = fresh_store(backend).await;
    let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()));
    let services = Services {
        store: store.clone(),
        pricing: default_pricing(),
        settler,
        clock: clock.clone(),
        config: Arc::new(Config {
            public_url: "https://anchor.test".into(),
            pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            dab_default: MilliDac::from_dac(1000),
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
    };
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
    (services, clock, agent, cleanup)
}

async fn create_and_confirm_through_the_use_cases(backend: Backend) {
    let (services, clock, agent, _cleanup) = setup(backend, Arc::new(anchor_x402::settlement::LocalSettler)).await;
    let store = services.store.clone();
    let now = clock.now();
    let agent_id = agent.agent_id;

    // Trial pays: no payment offered, none needed.
    let stored = declarations::create(&services, &agent, input("EE_basic"), Offered::None).await.unwrap();
    assert_eq!(stored.base_fee_source, PaymentSource::Trial);
    assert_eq!(stored.settlement_status.as_str(), "unreserved");
    let confirmed = declarations::confirm(&services, agent_id, stored.declaration.dd_id).await.unwrap();
    assert!(confirmed.settlement.is_none());
    assert!(confirmed.integrity_hash.starts_with("sha256:"));
    assert!(confirmed.usage.iter().all(|u| u.source == PaymentSource::Trial));
    let again = declarations::confirm(&services, agent_id, stored.declaration.dd_id).await.unwrap_err();
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
    let paid = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(payload.clone())).await.unwrap();
    assert_eq!(paid.base_fee_source, PaymentSource::External);
    assert_eq!(paid.settlement_status.as_str(), "pending");
    let confirmed = declarations::confirm(&services, agent_id, paid.declaration.dd_id).await.unwrap();
    let (reference, payer) = confirmed.settlement.expect("settled externally");
    assert!(reference.starts_with("local:0x"), "{reference}");
    assert_eq!(payer, "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266");

    // Refused payments: a used authorization, an expired one, a malformed header.
    let replayed = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(payload)).await.unwrap_err();
    let AppError::PaymentRequired(required) = replayed else { panic!("expected a challenge, got {replayed:?}") };
    assert_eq!(required.reason.as_deref(), Some("invalid_exact_evm_nonce_already_used"));
    let expired = pay(&challenge, now.timestamp(), Twist { valid_before_in: Some(-1), ..Twist::default() });
    let refused = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(expired)).await.unwrap_err();
    let AppError::PaymentRequired(required) = refused else { panic!("expected a challenge, got {refused:?}") };
    assert_eq!(required.reason.as_deref(), Some("invalid_exact_evm_payload_authorization_valid_before"));
    let malformed = declarations::create(&services, &agent, input("EE_high"), Offered::Malformed("not base64".into())).await.unwrap_err();
    assert_eq!(malformed.code(), "INVALID_PAYLOAD");
    // None of the refusals recorded anything: five declarations in all.
    let (_, total) = store.list_declarations(agent_id, anchor_store::ListFilter { limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(total, 5);
}

/// Records what the pipeline asked it to, and how often.
#[derive(Default)]
struct Observe(std::sync::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Commit for Observe {
    type Output = (Uuid, String);
    async fn commit(&self, funding: Funding) -> anchor_app::AppResult<Committed<(Uuid, String)>> {
        let Funding::Settled { payment_id, reference, .. } = funding else { panic!("an inline route was asked to reserve") };
        self.0.lock().unwrap().push(reference.clone());
        Ok(Committed::Done((payment_id, reference)))
    }
}

async fn inline_payments_settle_before_the_answer(backend: Backend) {
    let settler = Scripted::new(Vec::new());
    let (services, clock, agent, _cleanup) = setup(backend, settler.clone()).await;
    let store = services.store.clone();
    let now = clock.now();
    let agent_id = agent.agent_id;
    let route = Route { method: "GET", path: "/v1/ara/environment" };
    let order = |subject: Subject, offered: Offered| Order {
        agent_id,
        route,
        path: None,
        total: MilliDac::from_dac(1),
        description: "Environment observation".into(),
        trial: TrialUse::None,
        earned: MilliDac::ZERO,
        offered,
        settle: Settle::Inline(subject),
        pending: None,
    };
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
    let (payment_id, reference) = charge::charge(&services, order(first, Offered::Payload(payload.clone())), &observe).await.unwrap();
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

    // The same authorization again: refused before anything is written or settled.
    let second = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    let replayed = charge::charge(&services, order(second, Offered::Payload(payload)), &observe).await.unwrap_err();
    let AppError::PaymentRequired(required) = replayed else { panic!("expected a challenge, got {replayed:?}") };
    assert_eq!(required.reason.as_deref(), Some("invalid_exact_evm_nonce_already_used"));

    // Settlement refused: the payment ends, nothing is recorded, the commit never runs.
    settler.0.lock().unwrap().push(Settled::No { reason: "insufficient_funds".into() });
    let refused = charge::charge(&services, order(second, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()))), &observe)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "SETTLEMENT_FAILED");
    assert!(store.usage_for(second).await.unwrap().is_empty());

    // Outcome unknown: 503 now, settled once by the reconciliation job, usage then.
    let third = Subject { domain: SubjectDomain::AraObservation, id: Uuid::new_v4() };
    settler.0.lock().unwrap().push(Settled::Unknown { detail: "facilitator timed out".into() });
    let pending = charge::charge(&services, order(third, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()))), &observe)
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

/// An order whose surcharge Earned DAC pays: debited with the reservation
/// (the challenge asks for the rest only), recorded as usage with the
/// settlement, given back into the same lots when settlement is refused, held
/// while the outcome is unknown; and refused before any challenge when the
/// balance cannot pay.
async fn earned_pays_its_part_and_comes_back_when_settlement_is_refused(backend: Backend) {
    let settler = Scripted::new(Vec::new());
    let (services, clock, agent, _cleanup) = setup(backend, settler.clone()).await;
    let store = services.store.clone();
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

    // Paid: 3 over x402 and 2 from Earned, both usage of the one subject.
    charge::charge(&services, order(agent_id, first, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()))), &observe)
        .await
        .unwrap();
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
    let refused =
        charge::charge(&services, order(agent_id, second, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()))), &observe)
            .await
            .unwrap_err();
    assert_eq!(refused.code(), "SETTLEMENT_FAILED");
    assert!(store.usage_for(second).await.unwrap().is_empty());
    assert_eq!(balance().await, MilliDac::from_dac(38));
    let ledger = store.earned_ledger(agent_id, 2, 0).await.unwrap();
    assert_eq!((ledger[0].kind, ledger[1].kind), (anchor_domain::earned::EntryKind::Refund, anchor_domain::earned::EntryKind::Debit));
    assert_eq!(ledger[0].reference, Some(second));

    // Outcome unknown: the 2 stay debited until the job settles it; then they are usage.
    let third = subject();
    settler.0.lock().unwrap().push(Settled::Unknown { detail: "facilitator timed out".into() });
    let pending =
        charge::charge(&services, order(agent_id, third, Offered::Payload(pay(&challenge, now.timestamp(), Twist::default()))), &observe)
            .await
            .unwrap_err();
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
