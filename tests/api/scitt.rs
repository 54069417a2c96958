//! SCITT registration (SCRAPI): a signed statement from an allowed issuer
//! becomes a leaf of the one log, beside the declarations, and gets a COSE
//! receipt that verifies offline against the log's signed checkpoint; every
//! refusal is concise problem details (CBOR) with SCRAPI's title; the
//! payload is never stored.

use anchor_app::receipt_key::ReceiptKey;
use anchor_app::scitt::{Issuer, Registry};
use anchor_domain::Clock;
use anchor_tests::*;
use anchor_verify::statement::{parse_statement, sign_statement, verify_statement_receipt};
use coset::cbor::value::Value as Cbor;
use coset::{CborSerializable, TaggedCborSerializable};
use serde_json::json;

anchor_tests::both_backends!(
    a_statement_becomes_a_leaf_of_the_one_log_and_its_receipt_verifies,
    statements_outside_the_policy_are_refused_with_their_titles,
);

const ISSUER: &str = "https://issuer.example";

fn registry(key: &ReceiptKey) -> Registry {
    Registry::new(vec![Issuer { iss: ISSUER.into(), keys: vec![(Some(b"issuer-key-1".to_vec()), key.public().clone())] }]).unwrap()
}

fn statement(key: &ReceiptKey, kid: &[u8], iss: &str, payload: &[u8]) -> Vec<u8> {
    sign_statement(iss, "pkg:demo/tool@1.2.3", Some("application/json"), payload, kid, |tbs| key.sign(tbs)).unwrap()
}

/// A statement whose CWT claims carry `claim` (4, exp; 5, nbf) at `at`.
fn dated_statement(key: &ReceiptKey, kid: &[u8], claim: i64, at: i64) -> Vec<u8> {
    let claims = Cbor::Map(vec![
        (Cbor::Integer(1.into()), Cbor::Text(ISSUER.into())),
        (Cbor::Integer(2.into()), Cbor::Text("pkg:demo/tool@1.2.3".into())),
        (Cbor::Integer(claim.into()), Cbor::Integer(at.into())),
    ]);
    let protected = coset::HeaderBuilder::new().algorithm(coset::iana::Algorithm::ES256).key_id(kid.to_vec()).value(15, claims).build();
    let message =
        coset::CoseSign1Builder::new().protected(protected).payload(b"{}".to_vec()).create_signature(b"", |tbs| key.sign(tbs)).build();
    message.to_tagged_vec().unwrap()
}

async fn post_entry(t: &TestServer, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    no_redirects.post(t.url("/entries")).header("content-type", content_type).body(body).send().await.unwrap()
}

async fn get_entry(location: &str) -> reqwest::Response {
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    no_redirects.get(location).header("accept", "application/cose").send().await.unwrap()
}

/// A refusal's status, SCRAPI title and code, read as concise problem details.
async fn problem(reply: reqwest::Response) -> (u16, String, String) {
    let status = reply.status().as_u16();
    assert_eq!(reply.headers()["content-type"], "application/concise-problem-details+cbor", "status {status}");
    let body = reply.bytes().await.unwrap();
    let Cbor::Map(entries) = Cbor::from_slice(&body).expect("CBOR") else { panic!("a problem is a map") };
    let text = |key: Cbor| match entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v) {
        Some(Cbor::Text(t)) => t.clone(),
        other => panic!("no text under {key:?}: {other:?}"),
    };
    let detail = text(Cbor::Integer((-2).into()));
    assert!(!detail.is_empty());
    (status, text(Cbor::Integer((-1).into())), text(Cbor::Text("error_code".into())))
}

async fn a_statement_becomes_a_leaf_of_the_one_log_and_its_receipt_verifies(backend: Backend) {
    let issuer = ReceiptKey::generate();
    let t = TestServer::with(backend, Options { scitt: registry(&issuer), ..Default::default() }).await;
    // A declaration before and after: one tree holds both kinds of leaf.
    let agent = t.register().await;
    let first = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    assert_eq!(t.confirm(&agent, first["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);
    t.wait_for_log(1).await;

    let marker = "payload-that-is-never-stored-7f3c";
    let signed = statement(&issuer, b"issuer-key-1", ISSUER, format!("{{\"sha256\":\"{marker}\"}}").as_bytes());
    let posted = post_entry(&t, "application/cose", signed.clone()).await;
    assert_eq!(posted.status().as_u16(), 303, "registration runs: 303 See Other");
    assert_eq!(posted.headers()["retry-after"], "1");
    let location = posted.headers()["location"].to_str().unwrap().to_owned();
    let entry_id = hex::encode(parse_statement(&signed).unwrap().entry_id);
    assert_eq!(location, t.url(&format!("/entries/{entry_id}")));

    // (The test clock stands still: a declaration confirmed now would come
    // first, so the second waits for the statement's index.)
    let waiting = std::time::Instant::now();
    while t.scalar("select count(*) from scitt_entry where leaf_index is not null").await == 0 {
        assert!(waiting.elapsed() < std::time::Duration::from_secs(30), "the statement was not integrated");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let second = t.create(&agent, json!({ "ee_preset": "EE_basic" })).await;
    assert_eq!(t.confirm(&agent, second["dd_id"].as_str().unwrap()).await.status.as_u16(), 200);

    // 302 while it runs, then 200 with the receipt.
    let started = std::time::Instant::now();
    let receipt = loop {
        let reply = get_entry(&location).await;
        match reply.status().as_u16() {
            302 => {
                assert_eq!(reply.headers()["location"].to_str().unwrap(), location);
                assert!(reply.headers().contains_key("retry-after"));
            }
            200 => {
                assert_eq!(reply.headers()["content-type"], "application/cose");
                break reply.bytes().await.unwrap().to_vec();
            }
            other => panic!("GET {location}: {other}"),
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the statement was not receipted");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let keys = t.http.get(t.url("/.well-known/scitt-keys")).send().await.unwrap().bytes().await.unwrap();
    let keys = anchor_verify::cose::parse_keys(&keys).unwrap();
    let cose = anchor_verify::cose::parse_receipt(&receipt).unwrap();
    assert_eq!(cose.claims.sub, "pkg:demo/tool@1.2.3", "the receipt is about the statement's subject");
    assert_eq!(cose.claims.iss, t.base);
    let verified = verify_statement_receipt(&cose, &signed, &keys, &t.log_key.vkey).expect("the statement's receipt verifies");
    assert_eq!(verified.leaf_index, 1, "the statement came between the two declarations");
    // Any change to the statement, or another statement, fails.
    let other = statement(&issuer, b"issuer-key-1", ISSUER, b"{\"sha256\":\"another\"}");
    assert!(verify_statement_receipt(&cose, &other, &keys, &t.log_key.vkey).is_err());
    let stranger = ReceiptKey::generate();
    assert!(verify_statement_receipt(&cose, &signed, &[stranger.public().clone()], &t.log_key.vkey).is_err());

    // The log's public entries hold the statement's leaf at its index, and
    // they hash to the signed root: one tree.
    let size = t.wait_for_log(3).await.size;
    let bundle = t.http.get(t.url(&format!("/v1/log/tile/entries/000.p/{size}"))).send().await.unwrap().bytes().await.unwrap();
    let leaves = anchor_verify::parse_entry_bundle(&bundle).unwrap();
    assert_eq!(leaves.len() as i64, size);
    assert_eq!(leaves[1], parse_statement(&signed).unwrap().leaf());
    assert!(leaves[0].starts_with(b"anchor-leaf/1\n") && leaves[2].starts_with(b"anchor-leaf/1\n"));
    let note = t.http.get(t.url(&format!("/v1/log/checkpoints/{size}"))).send().await.unwrap().text().await.unwrap();
    anchor_verify::verify_entries(&leaves, &note, &t.log_key.vkey).expect("the entries hash to the signed root");
    // The declarations' receipts still verify, at their own indexes.
    for dd in [&first, &second] {
        let reply = t.get(&format!("/v1/dd/{}/receipt", dd["dd_id"].as_str().unwrap()), Some(&agent.token)).await;
        let receipt: anchor_verify::Receipt = serde_json::from_value(reply.json).unwrap();
        anchor_verify::verify_receipt(&receipt, &t.log_key.vkey).unwrap();
    }

    // The same statement again (a receipt in its unprotected header, as a
    // transparent statement carries it) is the same entry: 201 with its receipt.
    let mut transparent = coset::CoseSign1::from_tagged_slice(&signed).unwrap();
    transparent.unprotected.rest.push((coset::Label::Int(394), Cbor::Array(vec![Cbor::Bytes(receipt.clone())])));
    let again = post_entry(&t, "application/cose; charset=binary", transparent.to_tagged_vec().unwrap()).await;
    assert_eq!(again.status().as_u16(), 201);
    assert_eq!(again.headers()["location"].to_str().unwrap(), location);
    let again = anchor_verify::cose::parse_receipt(&again.bytes().await.unwrap()).unwrap();
    verify_statement_receipt(&again, &signed, &keys, &t.log_key.vkey).unwrap();
    assert_eq!(t.scalar("select count(*) from scitt_entry").await, 1);

    // What is kept: who, about what, the leaf; never the payload.
    assert!(!t.database_holds(marker).await, "the statement's payload is not stored");
    assert!(t.database_holds("pkg:demo/tool@1.2.3").await);
}

async fn statements_outside_the_policy_are_refused_with_their_titles(backend: Backend) {
    let issuer = ReceiptKey::generate();
    let t = TestServer::with(backend, Options { scitt: registry(&issuer), ..Default::default() }).await;
    let thumbprint = issuer.kid();
    let good = statement(&issuer, &thumbprint, ISSUER, b"{}");
    let refused =
        |title: &'static str, code: &'static str| move |got: (u16, String, String)| assert_eq!(got, (400, title.into(), code.into()));

    // A receipt key no kid names is refused as the registration's refusals
    // are, its code beside its title.
    let no_key = t.http.get(t.url("/.well-known/scitt-keys/AAAA")).send().await.unwrap();
    assert_eq!(problem(no_key).await, (404, "No such key".into(), "NOT_FOUND".into()));

    // Not COSE at all, or sent as something else.
    let json = post_entry(&t, "application/json", b"{}".to_vec()).await;
    assert_eq!(problem(json).await, (415, "Unsupported Media Type".into(), "UNSUPPORTED_MEDIA_TYPE".into()));
    refused("Invalid Signed Statement", "STATEMENT_MALFORMED")(
        problem(post_entry(&t, "application/cose", b"\xd2junk".to_vec()).await).await,
    );
    refused("Invalid Signed Statement", "STATEMENT_MALFORMED")(problem(post_entry(&t, "application/cose", Vec::new()).await).await);
    // Another algorithm than ES256.
    let mut es384 = coset::CoseSign1::from_tagged_slice(&good).unwrap();
    es384.protected = coset::ProtectedHeader {
        original_data: None,
        header: coset::Header {
            alg: Some(coset::RegisteredLabelWithPrivate::Assigned(coset::iana::Algorithm::ES384)),
            ..es384.protected.header
        },
    };
    refused("Bad Signature Algorithm", "STATEMENT_BAD_ALGORITHM")(
        problem(post_entry(&t, "application/cose", es384.to_tagged_vec().unwrap()).await).await,
    );
    // A detached payload.
    let mut detached = coset::CoseSign1::from_tagged_slice(&good).unwrap();
    detached.payload = None;
    refused("Payload Missing", "STATEMENT_PAYLOAD_MISSING")(
        problem(post_entry(&t, "application/cose", detached.to_tagged_vec().unwrap()).await).await,
    );
    // An issuer not allowed; a key not the issuer's; a kid naming no key; a payload changed after signing.
    let rejected = refused("Rejected", "STATEMENT_REJECTED");
    rejected(problem(post_entry(&t, "application/cose", statement(&issuer, &thumbprint, "https://other.example", b"{}")).await).await);
    let stranger = ReceiptKey::generate();
    rejected(problem(post_entry(&t, "application/cose", statement(&stranger, &thumbprint, ISSUER, b"{}")).await).await);
    rejected(problem(post_entry(&t, "application/cose", statement(&issuer, b"no-such-kid", ISSUER, b"{}")).await).await);
    let mut changed = coset::CoseSign1::from_tagged_slice(&good).unwrap();
    changed.payload = Some(b"{\"x\":1}".to_vec());
    rejected(problem(post_entry(&t, "application/cose", changed.to_tagged_vec().unwrap()).await).await);
    // Outside its CWT validity by the service's clock: expired (exp at or
    // before now), or not valid yet (nbf after now).
    let now = t.clock.now().timestamp();
    rejected(problem(post_entry(&t, "application/cose", dated_statement(&issuer, &thumbprint, 4, now)).await).await);
    rejected(problem(post_entry(&t, "application/cose", dated_statement(&issuer, &thumbprint, 5, now + 60)).await).await);
    // Issuer and subject with control characters, or empty.
    refused("Invalid Signed Statement", "STATEMENT_MALFORMED")(
        problem(post_entry(&t, "application/cose", statement(&issuer, &thumbprint, "https://issuer.example\0", b"{}")).await).await,
    );
    // Over 64 KiB.
    let big = statement(&issuer, &thumbprint, ISSUER, &vec![b'a'; 70 * 1024]);
    let too_large = post_entry(&t, "application/cose", big).await;
    assert_eq!(problem(too_large).await, (413, "Payload Too Large".into(), "PAYLOAD_TOO_LARGE".into()));
    assert_eq!(t.scalar("select count(*) from scitt_entry").await, 0, "nothing refused was registered");

    // Locators: not an entry id, and an unknown one.
    assert_eq!(problem(get_entry(&t.url("/entries/not-hex")).await).await, (400, "Invalid locator".into(), "INVALID_LOCATOR".into()));
    assert_eq!(
        problem(get_entry(&t.url(&format!("/entries/{}", "0".repeat(64)))).await).await,
        (404, "Not Found".into(), "ENTRY_NOT_FOUND".into())
    );
    // The statement signed under the key's thumbprint is accepted.
    assert_eq!(post_entry(&t, "application/cose", good).await.status().as_u16(), 303);
    // One valid for a minute is accepted, and is still the same entry when
    // sent again after it expired.
    let expiring = dated_statement(&issuer, &thumbprint, 4, now + 60);
    let first = post_entry(&t, "application/cose", expiring.clone()).await;
    assert_eq!(first.status().as_u16(), 303);
    let location = first.headers()["location"].to_str().unwrap().to_owned();
    t.clock.advance(chrono::Duration::seconds(61));
    let again = post_entry(&t, "application/cose", expiring).await;
    assert!(matches!(again.status().as_u16(), 201 | 303), "an entry registered while valid is not refused later: {}", again.status());
    assert_eq!(again.headers()["location"].to_str().unwrap(), location);
    assert_eq!(t.scalar("select count(*) from scitt_entry").await, 2, "the good statement and the expiring one, once");

    // A server with no issuer registers nothing.
    let closed = TestServer::start(backend).await;
    let reply = post_entry(&closed, "application/cose", statement(&issuer, &thumbprint, ISSUER, b"{}")).await;
    assert_eq!(problem(reply).await.1, "Rejected");

    // The rate limit answers a COSE client in CBOR too.
    let limited = TestServer::with(backend, Options { scitt: registry(&issuer), rate_limit: 2, ..Default::default() }).await;
    let mut last = None;
    for _ in 0..4 {
        last = Some(post_entry(&limited, "application/cose", statement(&issuer, &thumbprint, ISSUER, b"{}")).await);
    }
    let last = last.unwrap();
    assert!(last.headers().contains_key("retry-after"));
    assert_eq!(problem(last).await, (429, "Too Many Requests".into(), "RATE_LIMITED".into()));
}
