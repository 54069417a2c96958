//! `/openapi.json` against the reference interface: every operation we
//! implement exists there with the same method and path, and the field names
//! (request bodies, 2xx response bodies, parameters) and request enums match.

use std::collections::{BTreeMap, BTreeSet};

use anchor_tests::*;
use serde_json::Value;

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(doc, doc.pointer(&r.replace("#/", "/")).unwrap_or_else(|| panic!("dangling {r}"))),
        None => schema,
    }
}

/// Field paths of a schema (`dd.decision_type`, `accepts[].amount`), with
/// their enums; a recursive schema (a tree of nodes) is followed six levels.
fn fields(doc: &Value, schema: &Value, prefix: &str, out: &mut BTreeMap<String, Option<BTreeSet<String>>>) {
    if prefix.matches(['.', '[']).count() > 6 {
        return;
    }
    let schema = resolve(doc, schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            // A field the reference's OpenAPI lacks but its spec or published SDK sends, marked with why.
            if sub.get("x-anchor-beyond-reference").and_then(Value::as_str).is_some_and(|why| !why.is_empty()) {
                continue;
            }
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            let sub_resolved = resolve(doc, sub);
            let sub_resolved = sub_resolved
                .get("anyOf")
                .and_then(Value::as_array)
                .and_then(|parts| parts.iter().map(|p| resolve(doc, p)).find(|p| p.get("enum").is_some() || p.get("properties").is_some()))
                .unwrap_or(sub_resolved);
            let enumeration = sub_resolved
                .get("enum")
                .and_then(Value::as_array)
                .map(|values| values.iter().filter(|v| !v.is_null()).map(|v| v.to_string()).collect::<BTreeSet<_>>());
            out.insert(path.clone(), enumeration);
            fields(doc, sub_resolved, &path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        fields(doc, items, &format!("{prefix}[]"), out);
    }
    // A nullable object (`anyOf: [$ref, null]`) or a composed one has its fields in its parts.
    for key in ["anyOf", "allOf", "oneOf"] {
        for part in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            fields(doc, part, prefix, out);
        }
    }
}

fn request_fields(doc: &Value, operation: &Value) -> BTreeMap<String, Option<BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    if let Some(schema) = operation.pointer("/requestBody/content/application~1json/schema") {
        fields(doc, schema, "", &mut out);
    }
    out
}

fn response_fields(doc: &Value, operation: &Value) -> BTreeSet<String> {
    let mut out = BTreeMap::new();
    for (status, response) in operation["responses"].as_object().unwrap() {
        if status.starts_with('2')
            && let Some(schema) = response.pointer("/content/application~1json/schema")
        {
            fields(doc, schema, "", &mut out);
        }
    }
    out.into_keys().collect()
}

fn parameters(operation: &Value) -> BTreeSet<String> {
    operation["parameters"]
        .as_array()
        .map(|ps| ps.iter().map(|p| format!("{}:{}", p["in"].as_str().unwrap(), p["name"].as_str().unwrap())).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn generated_openapi_matches_the_reference_for_every_implemented_operation() {
    let reference = reference_interface();
    let t = TestServer::start(Backend::Sqlite).await;
    let ours = t.get("/openapi.json", None).await.json;
    let mut implemented = Vec::new();
    let mut problems = Vec::new();
    for (path, methods) in ours["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            if operation.get("x-anchor-extension").is_some() {
                assert!(
                    reference["paths"].get(path).and_then(|p| p.get(method)).is_none(),
                    "{method} {path} is marked as ours but exists in the reference"
                );
                continue;
            }
            let Some(theirs) = reference["paths"].get(path).and_then(|p| p.get(method)) else {
                problems.push(format!("{method} {path} is not in the reference"));
                continue;
            };
            implemented.push(format!("{} {path}", method.to_uppercase()));
            if parameters(operation) != parameters(theirs) {
                problems.push(format!("{method} {path}: parameters {:?} vs reference {:?}", parameters(operation), parameters(theirs)));
            }
            let (our_request, their_request) = (request_fields(&ours, operation), request_fields(&reference, theirs));
            for (field, their_enum) in &their_request {
                match our_request.get(field) {
                    None => problems.push(format!("{method} {path}: request field {field} missing")),
                    Some(our_enum) if their_enum.is_some() && our_enum != their_enum => {
                        problems.push(format!("{method} {path}: request field {field} enum {our_enum:?} vs {their_enum:?}"))
                    }
                    _ => {}
                }
            }
            // Where the reference leaves a request body unspecified, ours is ours to define.
            let theirs_specified = theirs.get("requestBody").is_some();
            for field in our_request.keys() {
                if theirs_specified && !their_request.contains_key(field) {
                    problems.push(format!("{method} {path}: request field {field} is not in the reference"));
                }
            }
            let our_response = response_fields(&ours, operation);
            for field in response_fields(&reference, theirs) {
                if !our_response.contains(&field) {
                    problems.push(format!("{method} {path}: response field {field} missing"));
                }
            }
            let their_statuses: BTreeSet<&String> = theirs["responses"].as_object().unwrap().keys().collect();
            for status in operation["responses"].as_object().unwrap().keys() {
                if status.starts_with('2') && !their_statuses.contains(status) {
                    problems.push(format!("{method} {path}: success status {status} differs from the reference {their_statuses:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} differences:\n{}", problems.len(), problems.join("\n"));
    implemented.sort();
    let expected = [
        "DELETE /dap/account",
        "DELETE /dap/agent/unlink",
        "DELETE /dap/asa/subscription/{agent_id}",
        "DELETE /dap/classification/{id}",
        "DELETE /dap/dab/remove",
        "DELETE /v1/asa/subscribe",
        "DELETE /v1/tsl/tool/{tool_id}/transfer-declaration",
        "GET /dap/account/deletion-status",
        "GET /dap/account/export",
        "GET /dap/account/me",
        "GET /dap/agent/{agent_id}/report",
        "GET /dap/agent/{agent_id}/report/export",
        "GET /dap/agent/{agent_id}/report/weekly",
        "GET /dap/agents",
        "GET /dap/asa/snapshot/{agent_id}",
        "GET /dap/asa/subscription/{agent_id}",
        "GET /dap/classification",
        "GET /dap/dab/status",
        "GET /dap/dashboard",
        "GET /dap/dur/export",
        "GET /dap/dur/summary",
        "GET /dap/evidence-report",
        "GET /dap/policy/content-inclusion",
        "GET /dap/register/suggested-country",
        "GET /dap/system/limits",
        "GET /dap/trial/status",
        "GET /dap/tsl/human-shares",
        "GET /v1/ara/agent/{agent_id}/ee-pattern",
        "GET /v1/ara/agent/{agent_id}/profile",
        "GET /v1/ara/agent/{agent_id}/timeline",
        "GET /v1/ara/anomaly-compare",
        "GET /v1/ara/environment",
        "GET /v1/ara/environment-anomaly",
        "GET /v1/ara/environment/density",
        "GET /v1/ara/environment/summary",
        "GET /v1/ara/environment/tsl",
        "GET /v1/ara/evidence-report",
        "GET /v1/ara/pattern/action-type",
        "GET /v1/ara/pattern/compare",
        "GET /v1/ara/pattern/ee-distribution",
        "GET /v1/asa/snapshot",
        "GET /v1/asa/subscription",
        "GET /v1/classification",
        "GET /v1/dab/status",
        "GET /v1/dd/bilateral/received",
        "GET /v1/dd/bilateral/sent",
        "GET /v1/dd/lineage-group/{group_id}",
        "GET /v1/dd/list",
        "GET /v1/dd/{dd_id}",
        "GET /v1/dd/{dd_id}/lineage",
        "GET /v1/dur/decision-metadata",
        "GET /v1/dur/decision-scale",
        "GET /v1/dur/export",
        "GET /v1/dur/self-classification",
        "GET /v1/dur/summary",
        "GET /v1/dur/transactions",
        "GET /v1/dur/tsl",
        "GET /v1/earned-dac/balance",
        "GET /v1/earned-dac/ledger",
        "GET /v1/ise/status",
        "GET /v1/payment/{dd_id}/status",
        "GET /v1/pricing/current",
        "GET /v1/pricing/ee-presets",
        "GET /v1/retention/indefinite/status",
        "GET /v1/sdac/session/{session_id}",
        "GET /v1/trial/status",
        "GET /v1/tsl/purchases",
        "GET /v1/tsl/revenue",
        "GET /v1/tsl/tool/{tool_id}",
        "GET /v1/tsl/tool/{tool_id}/dependencies",
        "GET /v1/tsl/tool/{tool_id}/revenue-shares",
        "GET /v1/tsl/tool/{tool_id}/transfer-declaration",
        "GET /v1/tsl/tools",
        "PATCH /dap/classification/{id}",
        "PATCH /v1/asa/subscription",
        "POST /dap/account/restore",
        "POST /dap/agent/link",
        "POST /dap/asa/verify/{agent_id}",
        "POST /dap/auth/agent-login",
        "POST /dap/classification",
        "POST /dap/login",
        "POST /dap/logout",
        "POST /dap/owner/register-agent",
        "POST /dap/register",
        "POST /dap/tsl/human-share",
        "POST /v1/agent/register",
        "POST /v1/agent/token/recover",
        "POST /v1/agent/token/rotate",
        "POST /v1/ara/query",
        "POST /v1/asa/extend",
        "POST /v1/asa/register",
        "POST /v1/asa/subscribe",
        "POST /v1/asa/verify",
        "POST /v1/dd/bilateral/propose",
        "POST /v1/dd/bilateral/{agreement_id}/respond",
        "POST /v1/dd/confirm",
        "POST /v1/dd/create",
        "POST /v1/ise/enter",
        "POST /v1/ise/exit",
        "POST /v1/retention/indefinite/cancel",
        "POST /v1/retention/indefinite/subscribe",
        "POST /v1/sdac/session/end",
        "POST /v1/sdac/session/start",
        "POST /v1/sdac/trial",
        "POST /v1/tsl/purchase",
        "POST /v1/tsl/purchase/layer2",
        "POST /v1/tsl/revenue-share",
        "POST /v1/tsl/tool/register",
        "POST /v1/tsl/tool/{tool_id}/dependency",
        "POST /v1/tsl/tool/{tool_id}/transfer-declaration",
        "PUT /dap/account/marketing-consent",
        "PUT /dap/account/residence",
        "PUT /dap/dab/set",
        "PUT /dap/password",
        "PUT /dap/policy/content-inclusion",
        "PUT /v1/agent/disclosure",
    ];
    assert_eq!(implemented, expected);
}

/// Every request example the document gives is one its operation reads: sent
/// as it is (path parameters a UUID, with an agent's token or an owner's
/// session), none is refused 400 for its form.
#[tokio::test]
async fn every_request_example_is_read_by_its_operation() {
    let t = TestServer::start(Backend::Sqlite).await;
    let agent = t.register().await;
    let owner = t.owner("examples@example.com").await;
    let document = t.get("/openapi.json", None).await.json;
    let mut sent = 0;
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let Some(example) = operation.pointer("/requestBody/content/application~1json/example") else { continue };
            let mut concrete = String::new();
            for part in path.split_inclusive(['{', '}']) {
                match part.strip_suffix('}') {
                    Some(_) => concrete.push_str("0196b1a2-7c3d-7e4f-8a5b-6c7d8e9f0a1b"),
                    None => concrete.push_str(part.trim_end_matches('{')),
                }
            }
            let method = method.to_ascii_uppercase();
            let reply = if path.starts_with("/dap/") {
                t.as_owner(&owner, &method, &concrete, Some(example)).await
            } else {
                t.call(&method, &concrete, Some(&agent.token), Some(example)).await
            };
            assert_ne!(reply.status.as_u16(), 400, "{method} {path}: its example {example} is refused: {}", reply.text);
            sent += 1;
        }
    }
    assert!(sent >= 20, "only {sent} examples were found");
}
