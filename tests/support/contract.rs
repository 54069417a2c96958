//! Every response a test receives is checked against what the service's own
//! OpenAPI document says of it: a documented status for the operation, a
//! documented media type, and a JSON body that validates against the
//! response's schema, with no property the schema does not name.
//!
//! The document is the one the server builds from its route table and types
//! (the same function `GET /openapi.json` serves), converted from OpenAPI 3.0
//! schemas to JSON Schema (`nullable` becomes a `null` type) and made strict
//! (`additionalProperties: false` on every object that lists its properties,
//! so a field a handler adds without its type is caught).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value, json};

/// (METHOD, OpenAPI path, status) triples.
type Answered = BTreeSet<(String, String, u16)>;

/// The server's document, and the operations as the router knows them.
struct Contract {
    document: Value,
    /// (method, segments of the OpenAPI path, whether the last is a catch-all, OpenAPI path).
    routes: Vec<(String, Vec<String>, bool, String)>,
    validators: Mutex<HashMap<(String, String, String), Arc<jsonschema::Validator>>>,
    /// Per server (its base URL): every (method, path, status) it answered.
    seen: Mutex<HashMap<String, Answered>>,
}

fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let operations = anchor_server::areas::operations();
        let document = anchor_server::openapi::document(&operations, "http://127.0.0.1");
        let routes = operations
            .iter()
            .map(|o| {
                let catch_all = o.path.contains("{*");
                let path = o.path.replace("{*", "{");
                let segments = path.trim_start_matches('/').split('/').map(str::to_string).collect();
                (o.method.as_str().to_ascii_lowercase(), segments, catch_all, path)
            })
            .collect();
        Contract { document, routes, validators: Mutex::default(), seen: Mutex::default() }
    })
}

/// The OpenAPI path of the operation `method path` names, if it is one. The
/// path is matched first, as the router does (the match with the most literal
/// segments wins: `/v1/dd/list` over `/v1/dd/{dd_id}`), then the method.
pub fn operation_of(method: &str, path: &str) -> Option<String> {
    let method = method.to_ascii_lowercase();
    let path = path.split('?').next().unwrap_or_default();
    let given: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut best: Option<(usize, &String)> = None;
    for (_, segments, catch_all, openapi_path) in &contract().routes {
        let fits = if *catch_all {
            given.len() >= segments.len() && segments[..segments.len() - 1].iter().zip(&given).all(|(s, g)| s.starts_with('{') || s == g)
        } else {
            given.len() == segments.len() && segments.iter().zip(&given).all(|(s, g)| (s.starts_with('{') && !g.is_empty()) || s == g)
        };
        if fits {
            let literal = segments.iter().filter(|s| !s.starts_with('{')).count();
            if best.is_none_or(|(n, _)| literal > n) {
                best = Some((literal, openapi_path));
            }
        }
    }
    let (_, best) = best?;
    contract().routes.iter().any(|(m, _, _, p)| *m == method && p == best).then(|| best.clone())
}

/// OpenAPI 3.0 schema -> JSON Schema, strict about unnamed properties.
fn convert(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: Map<String, Value> = map.iter().map(|(k, v)| (k.clone(), convert(v))).collect();
            if out.get("properties").is_some() && !out.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            if out.remove("nullable") == Some(Value::Bool(true)) {
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), json!([t, "null"]));
                        if let Some(Value::Array(values)) = out.get_mut("enum")
                            && !values.contains(&Value::Null)
                        {
                            values.push(Value::Null);
                        }
                    }
                    _ => return json!({ "anyOf": [Value::Object(out), { "type": "null" }] }),
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(convert).collect()),
        other => other.clone(),
    }
}

fn resolve<'a>(document: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => document.pointer(reference.trim_start_matches('#')).unwrap_or(value),
        None => value,
    }
}

/// Checks one response against the document; panics with what is wrong.
/// Requests outside the documented operations (unknown paths, `OPTIONS`,
/// `HEAD`, the GET guide of a POST route) are not checked.
pub fn check(base: &str, method: &str, path: &str, status: u16, content_type: Option<&str>, text: &str) {
    let Some(openapi_path) = operation_of(method, path) else { return };
    let c = contract();
    let lower = method.to_ascii_lowercase();
    c.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).entry(base.to_string()).or_default().insert((
        method.to_ascii_uppercase(),
        openapi_path.clone(),
        status,
    ));
    let operation = &c.document["paths"][&openapi_path][&lower];
    let Some(response) = operation["responses"].get(status.to_string()) else {
        panic!("{method} {openapi_path} answered {status}, which its OpenAPI entry does not document: {}", brief(text));
    };
    let response = resolve(&c.document, response);
    // A refusal's error_code is one the operation names for that status.
    if status >= 400
        && let Ok(body) = serde_json::from_str::<Value>(text)
        && let Some(code) = body.get("error_code").and_then(Value::as_str)
    {
        let description = response["description"].as_str().unwrap_or_default();
        let named = description.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).any(|word| word == code);
        assert!(
            named,
            "{method} {openapi_path} answered {status} {code}, which its OpenAPI entry does not name for {status}: {description}"
        );
    }
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        assert!(text.is_empty(), "{method} {openapi_path} {status} documents no body but sent one: {}", brief(text));
        return;
    };
    let media = content_type.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    assert!(
        content.contains_key(&media),
        "{method} {openapi_path} {status} sent {media:?}, documented: {:?}",
        content.keys().collect::<Vec<_>>()
    );
    if media != "application/json" {
        return;
    }
    let key = (lower, openapi_path.clone(), status.to_string());
    let validator = {
        let mut validators = c.validators.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        validators
            .entry(key)
            .or_insert_with(|| {
                let mut root = convert(&content[&media]["schema"]);
                root["components"] = convert(&c.document["components"]);
                Arc::new(
                    jsonschema::draft202012::options()
                        .should_validate_formats(true)
                        .build(&root)
                        .unwrap_or_else(|e| panic!("the schema of {method} {openapi_path} {status} does not compile: {e}")),
                )
            })
            .clone()
    };
    let body: Value =
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{method} {openapi_path} {status} is not JSON: {}", brief(text)));
    let errors: Vec<String> = validator.iter_errors(&body).map(|e| format!("{} at {}", e, e.instance_path())).take(5).collect();
    assert!(errors.is_empty(), "{method} {openapi_path} {status} does not match its schema:\n{}\nbody: {}", errors.join("\n"), brief(text));
}

/// Every (method, OpenAPI path, status) the server at `base` answered and was checked.
pub fn seen(base: &str) -> Answered {
    contract().seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(base).cloned().unwrap_or_default()
}

/// Every documented operation, as (METHOD, path).
pub fn operations() -> BTreeSet<(String, String)> {
    contract().routes.iter().map(|(m, _, _, p)| (m.to_ascii_uppercase(), p.clone())).collect()
}

fn brief(text: &str) -> String {
    text.chars().take(600).collect()
}
