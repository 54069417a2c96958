//! Dates at their extremes, on every route that takes one: no 5xx, every
//! refusal a JSON body, and every date the service answers with RFC 3339
//! (a four-digit year; a refusal may quote the input). The routes are found in the served `/openapi.json`
//! (query parameters named from/to or of format date/date-time, and body
//! fields of format date-time), so a new route is covered when it lands.

use anchor_tests::*;
use serde_json::{Value, json};

both_backends!(extreme_and_malformed_dates_never_answer_5xx);

/// What each date is tried with: chrono's own extremes, the edges of the
/// years 0000 to 9999, offsets that cross them, and text that is not a date.
const DATES: &[&str] = &[
    "+262142-12-31",
    "-262143-01-01",
    "+10000-01-01",
    "10000-01-01",
    "9999-12-31",
    "0000-01-01",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:00:00-05:00",
    "0000-01-01T00:00:00+01:00",
    "0000-01-01T00:00:00Z",
    "-0001-12-31T00:00:00Z",
    "2026-02-30",
    "2026-13-01T00:00:00Z",
    "2026-11-01T25:61:61Z",
    "2026-11-01T09:00:00+24:00",
    "2026-11-01T09:00:00",
    "٢٠٢٦-١١-٠١",
    "2026-11-01\u{0}",
    "",
    "1e400",
    "99999999999999999999",
];

/// Paths of body fields of format date-time in `schema` (following `$ref`s).
fn date_fields(schema: &Value, components: &Value, path: Vec<String>, out: &mut Vec<Vec<String>>, depth: usize) {
    if depth > 6 {
        return;
    }
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.rsplit('/').next().unwrap_or("");
        date_fields(&components[name], components, path, out, depth + 1);
        return;
    }
    if matches!(schema.get("format").and_then(Value::as_str), Some("date" | "date-time")) {
        out.push(path.clone());
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let mut next = path.clone();
            next.push(name.clone());
            date_fields(property, components, next, out, depth + 1);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for part in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
            date_fields(part, components, path.clone(), out, depth + 1);
        }
    }
}

fn is_date_parameter(parameter: &Value) -> bool {
    let name = parameter["name"].as_str().unwrap_or("");
    let format = parameter["schema"]["format"].as_str().unwrap_or("");
    parameter["in"] == "query" && (matches!(format, "date" | "date-time") || matches!(name, "from" | "to" | "since" | "until" | "date"))
}

/// A date written with more than four digits of year (or a sign), anywhere in `text`.
fn five_digit_year(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    for start in 0..bytes.len() {
        let digits = bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        let preceded = start > 0 && (bytes[start - 1].is_ascii_digit() || bytes[start - 1] == b'.');
        if !preceded && digits >= 5 && bytes.get(start + digits) == Some(&b'-') && bytes.get(start + digits + 3) == Some(&b'-') {
            return Some(text[start.saturating_sub(1)..(start + digits + 6).min(text.len())].to_string());
        }
    }
    None
}

async fn extreme_and_malformed_dates_never_answer_5xx(backend: Backend) {
    let t = TestServer::start(backend).await;
    let agent = t.anchored_agent(json!({ "ee_preset": "EE_basic" })).await;
    let owner = t.owner("dates@example.com").await;
    let mut linked = t.register().await;
    t.link(&owner, &mut linked).await;
    let document = t.get("/openapi.json", None).await.json;
    let components = &document["components"]["schemas"];
    let mut tried = 0;
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let Some(operation) = operation.as_object() else { continue };
            let concrete = path.replace("{agent_id}", &linked.id).replace("{dd_id}", &uuid::Uuid::new_v4().to_string());
            if concrete.contains('{') {
                continue;
            }
            let owner_route = path.starts_with("/dap/");
            let call = |path: String, body: Option<Value>| {
                let (t, owner, agent, method) = (&t, &owner, &agent, method.to_uppercase());
                async move {
                    let bearer = format!("Bearer {}", agent.token);
                    let mut headers = vec![("authorization", bearer.as_str())];
                    if owner_route {
                        headers = vec![("cookie", owner.cookie.as_str()), ("x-csrf-token", owner.csrf.as_str())];
                    }
                    t.call_with(&method, &path, &headers, body.as_ref()).await
                }
            };
            // Query parameters.
            let parameters: Vec<String> = operation
                .get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|p| is_date_parameter(p))
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect();
            for name in &parameters {
                for date in DATES {
                    let encoded: String = date.bytes().map(|b| format!("%{b:02X}")).collect();
                    let reply = call(format!("{concrete}?{name}={encoded}"), None).await;
                    tried += 1;
                    let status = reply.status.as_u16();
                    assert!(status < 500, "{method} {path}?{name}={date:?} answered {status}: {}", reply.text);
                    if status >= 400 {
                        assert!(reply.json["error_code"].is_string(), "{method} {path}?{name}={date:?}: {}", reply.text);
                    }
                    if status < 400 {
                        assert_eq!(
                            five_digit_year(&reply.text),
                            None,
                            "{method} {path}?{name}={date:?}: {}",
                            anchor_domain::brief(&reply.text)
                        );
                    }
                }
            }
            // Body fields, in the operation's own example body.
            let content = &operation.get("requestBody").cloned().unwrap_or(Value::Null)["content"]["application/json"];
            let mut fields = Vec::new();
            date_fields(&content["schema"], components, Vec::new(), &mut fields, 0);
            let Some(example) = content.get("example") else {
                assert!(fields.is_empty(), "{method} {path} takes a date in its body and documents no example body to try it with");
                continue;
            };
            for field in &fields {
                for date in DATES {
                    let mut body = example.clone();
                    if let Some(object) = body.as_object_mut()
                        && object.contains_key("request_id")
                    {
                        object.insert("request_id".into(), json!(uuid::Uuid::new_v4()));
                    }
                    let mut target = &mut body;
                    for key in &field[..field.len() - 1] {
                        if !target[key].is_object() {
                            target[key] = json!({});
                        }
                        target = &mut target[key];
                    }
                    target[field.last().unwrap()] = json!(date);
                    let reply = call(concrete.clone(), Some(body)).await;
                    tried += 1;
                    let status = reply.status.as_u16();
                    assert!(status < 500, "{method} {path} with {}={date:?} answered {status}: {}", field.join("."), reply.text);
                    if status < 400 {
                        assert_eq!(five_digit_year(&reply.text), None, "{method} {path} {}={date:?}: {}", field.join("."), reply.text);
                    }
                }
            }
        }
    }
    assert!(tried > 200, "only {tried} requests carried a date");
    // The last day there is, as a range's end, is answered and written back as RFC 3339.
    let last = t.get("/v1/dur/summary?from=9999-12-31&to=9999-12-31", Some(&agent.token)).await;
    assert_eq!(last.status.as_u16(), 200, "{}", last.text);
    assert!(last.json["period"]["to"].as_str().unwrap().starts_with("9999-12-31T23:59:59"), "{}", last.text);
}
