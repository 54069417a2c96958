//! DD create and confirm driven through `anchor-app` with no HTTP at all: the
//! use cases, the charge pipeline and the typed "payment required" outcome,
//! on both backends, with a real pricing component and a local settler.

use std::sync::Arc;

use anchor_app::charge::Offered;
use anchor_app::declarations::{self, CreateInput, EeInput};
use anchor_app::{AppError, Config, Services};
use anchor_domain::agents::{TRIAL_DAC, TRIAL_DAYS};
use anchor_domain::declarations::dd::*;
use anchor_domain::declarations::ee;
use anchor_domain::{Clock, ManualClock, MilliDac};
use anchor_store::{AgentRecord, NewAgent, PaymentSource};
use anchor_tests::*;
use chrono::{TimeZone, Utc};
use uuid::Uuid;

use super::payments::{Twist, pay};

both_backends!(create_and_confirm_through_the_use_cases);

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

async fn create_and_confirm_through_the_use_cases(backend: Backend) {
    let (store, _cleanup) = fresh_store(backend).await;
    let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()));
    let services = Services {
        store: store.clone(),
        pricing: default_pricing(),
        settler: Arc::new(anchor_x402::settlement::LocalSettler),
        clock: clock.clone(),
        config: Arc::new(Config {
            public_url: "https://anchor.test".into(),
            pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            dab_default: MilliDac::from_dac(1000),
        }),
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
    let agent: AgentRecord = store.agent(agent_id).await.unwrap().unwrap();

    // Trial pays: no payment offered, none needed.
    let stored = declarations::create(&services, &agent, input("EE_basic"), Offered::None).await.unwrap();
    assert_eq!(stored.base_fee_source, PaymentSource::Trial);
    assert_eq!(stored.settlement_status, "unreserved");
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
    let challenge = required.challenge();
    assert_eq!(challenge["accepts"][0]["amount"], "157500");
    assert_eq!(challenge["resource"]["url"], "https://anchor.test/v1/dd/create");

    // Paid over x402: reserved at create, settled at confirm.
    let payload = pay(&challenge, now.timestamp(), Twist::default());
    let paid = declarations::create(&services, &agent, input("EE_high"), Offered::Payload(payload.clone())).await.unwrap();
    assert_eq!(paid.base_fee_source, PaymentSource::External);
    assert_eq!(paid.settlement_status, "pending");
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
