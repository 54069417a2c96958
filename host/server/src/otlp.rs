//! The host's own spans, exported over OTLP/HTTP in its JSON encoding
//! (`--otlp-endpoint`): one SERVER span per request, named and attributed
//! as OpenTelemetry's HTTP conventions say (`http.request.method`,
//! `http.route`, `http.response.status_code`, `error.type`), and under an
//! MCP request one INTERNAL span per tool call, as the GenAI conventions
//! name one (`execute_tool <tool>`, `gen_ai.operation.name`,
//! `gen_ai.tool.name`, `mcp.method.name`).
//!
//! The spans start traces of their own: a caller's `traceparent` is never
//! their parent and never an attribute. The caller's trace id is what a
//! record's salt may commit to ([`anchor_domain::trace`]); exporting it
//! would hand the link to whoever runs the collector. No path, query, body,
//! token or client address is exported either: the route template only.
//!
//! Exporting never slows an answer: spans go to a bounded queue a task
//! drains in batches; when the collector is slow or down, spans past the
//! queue's bound are dropped and counted, and a failed batch is dropped
//! after one warning.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Spans waiting for the exporter at most; more are dropped.
const QUEUE: usize = 4096;
/// Spans per export request at most.
const BATCH: usize = 512;
/// How long spans wait for a fuller batch at most.
const LINGER: Duration = Duration::from_millis(500);
/// How long one export request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// OTLP's span kinds used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
}

/// Where a span sits: its trace and its own id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl SpanContext {
    /// The root of a new trace.
    pub fn root() -> SpanContext {
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        rand::rng().fill_bytes(&mut trace_id);
        rand::rng().fill_bytes(&mut span_id);
        SpanContext { trace_id, span_id }
    }

    /// A new span in the same trace.
    pub fn child(&self) -> SpanContext {
        let mut span_id = [0u8; 8];
        rand::rng().fill_bytes(&mut span_id);
        SpanContext { trace_id: self.trace_id, span_id }
    }
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Text(String),
    Int(i64),
}

/// One finished span.
#[derive(Clone, Debug)]
pub struct Span {
    pub context: SpanContext,
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Attr)>,
    /// The span ended in error (a 5xx answer, a failed tool call).
    pub error: bool,
}

impl Span {
    /// An HTTP server span (OpenTelemetry's HTTP conventions): `{method}
    /// {route}` with the method, the route template (never the path, which
    /// holds ids) and the status; an error for a 5xx. The route `unmatched`
    /// names none; the method `other` is `_OTHER`.
    pub fn server(context: SpanContext, start: SystemTime, method: &str, route: &str, status: u16) -> Span {
        let method = if method == "other" { "_OTHER" } else { method };
        let matched = route != "unmatched";
        let mut attributes =
            vec![("http.request.method", Attr::Text(method.into())), ("http.response.status_code", Attr::Int(status.into()))];
        if matched {
            attributes.push(("http.route", Attr::Text(route.into())));
        }
        let error = status >= 500;
        if error {
            attributes.push(("error.type", Attr::Text(status.to_string())));
        }
        Span {
            context,
            parent: None,
            name: if matched { format!("{method} {route}") } else { method.to_string() },
            kind: Kind::Server,
            start,
            end: SystemTime::now(),
            attributes,
            error,
        }
    }

    /// An MCP tool call under the HTTP request's span (OpenTelemetry's MCP
    /// and GenAI conventions: `tools/call {tool}`, `execute_tool`); an error
    /// when the tool answered one.
    pub fn tool_call(parent: SpanContext, start: SystemTime, tool: &str, error: bool) -> Span {
        let mut attributes = vec![
            ("mcp.method.name", Attr::Text("tools/call".into())),
            ("gen_ai.operation.name", Attr::Text("execute_tool".into())),
            ("gen_ai.tool.name", Attr::Text(tool.to_string())),
        ];
        if error {
            attributes.push(("error.type", Attr::Text("tool_error".into())));
        }
        Span {
            context: parent.child(),
            parent: Some(parent.span_id),
            name: format!("tools/call {tool}"),
            kind: Kind::Internal,
            start,
            end: SystemTime::now(),
            attributes,
            error,
        }
    }
}

/// The exporter's queue, shared by every request of the host.
pub struct Exporter {
    queue: mpsc::Sender<Span>,
    dropped: AtomicU64,
}

impl Exporter {
    /// Starts the export task for `endpoint` (the collector's base URL, to
    /// which `/v1/traces` is added unless the URL already ends with it).
    pub fn start(endpoint: &str, host_id: uuid::Uuid) -> Arc<Exporter> {
        let url = traces_url(endpoint);
        let (queue, spans) = mpsc::channel(QUEUE);
        let exporter = Arc::new(Exporter { queue, dropped: AtomicU64::new(0) });
        let resource = json!({
            "attributes": [
                attribute("service.name", &Attr::Text("anchor".into())),
                attribute("service.version", &Attr::Text(env!("CARGO_PKG_VERSION").into())),
                attribute("service.instance.id", &Attr::Text(host_id.to_string())),
            ]
        });
        tokio::spawn(drain(url, resource, spans, Arc::downgrade(&exporter)));
        exporter
    }

    /// Queues a finished span; drops it when the queue is full.
    pub fn record(&self, span: Span) {
        if self.queue.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Spans dropped so far (queue full, or their batch refused).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The `--otlp-endpoint` given, checked: an http:// or https:// URL (over
/// TLS, the collector's certificate must chain to a root the host trusts:
/// the system's, or those of SSL_CERT_FILE), or none.
pub fn endpoint(given: Option<&str>) -> anyhow::Result<Option<String>> {
    let Some(endpoint) = given.map(str::trim).filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let rest = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://"));
    if rest.is_none_or(str::is_empty) || endpoint.chars().any(char::is_whitespace) {
        anyhow::bail!(
            "--otlp-endpoint {endpoint:?} is not an http:// or https:// URL: give the OTLP/HTTP base of a collector \
             (as http://127.0.0.1:4318)"
        );
    }
    Ok(Some(endpoint.to_string()))
}

fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") { endpoint.to_string() } else { format!("{endpoint}/v1/traces") }
}

async fn drain(url: String, resource: Value, mut spans: mpsc::Receiver<Span>, exporter: std::sync::Weak<Exporter>) {
    let http = match reqwest::Client::builder().timeout(TIMEOUT).build() {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!(error = %e, "the OTLP exporter has no HTTP client; no span is exported");
            return;
        }
    };
    let mut warned = false;
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = spans.recv().await {
        batch.push(first);
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < BATCH {
            match tokio::time::timeout_at(deadline, spans.recv()).await {
                Ok(Some(span)) => batch.push(span),
                _ => break,
            }
        }
        let body = encode(&resource, &batch);
        let sent = http.post(&url).header("content-type", "application/json").body(body.to_string()).send().await;
        let failure = match sent {
            Ok(reply) if reply.status().is_success() => None,
            Ok(reply) => Some(format!("the collector answered {}", reply.status())),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failure {
            if let Some(exporter) = exporter.upgrade() {
                exporter.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            if !warned {
                tracing::warn!(url = %url, why = %why, spans = batch.len(), "OTLP export failed; its spans are dropped (said once)");
                warned = true;
            }
        }
        batch.clear();
    }
}

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()).to_string()
}

fn attribute(key: &str, value: &Attr) -> Value {
    let value = match value {
        Attr::Text(text) => json!({ "stringValue": text }),
        // OTLP/JSON writes 64-bit integers as decimal strings.
        Attr::Int(n) => json!({ "intValue": n.to_string() }),
    };
    json!({ "key": key, "value": value })
}

/// An `ExportTraceServiceRequest` in OTLP's JSON encoding (ids in hex,
/// enums as numbers, 64-bit integers as strings).
pub fn encode(resource: &Value, spans: &[Span]) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| {
            let mut out = json!({
                "traceId": hex::encode(span.context.trace_id),
                "spanId": hex::encode(span.context.span_id),
                "name": span.name,
                "kind": span.kind as i32,
                "startTimeUnixNano": nanos(span.start),
                "endTimeUnixNano": nanos(span.end.max(span.start)),
                "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
                // STATUS_CODE_ERROR, else UNSET (a server span's 4xx is not its error).
                "status": if span.error { json!({ "code": 2 }) } else { json!({}) },
            });
            if let Some(parent) = span.parent {
                out["parentSpanId"] = json!(hex::encode(parent));
            }
            out
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": resource,
            "scopeSpans": [{ "scope": { "name": "anchor", "version": env!("CARGO_PKG_VERSION") }, "spans": spans }],
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_an_http_url() {
        assert_eq!(endpoint(None).unwrap(), None);
        assert_eq!(endpoint(Some("  ")).unwrap(), None);
        assert_eq!(endpoint(Some(" http://c:4318 ")).unwrap().as_deref(), Some("http://c:4318"));
        assert_eq!(endpoint(Some("https://collector.example:4318")).unwrap().as_deref(), Some("https://collector.example:4318"));
        for bad in ["ftp://c", "c:4318", "http://", "https://", "http://c d"] {
            assert!(endpoint(Some(bad)).unwrap_err().to_string().contains("--otlp-endpoint"), "{bad}");
        }
    }

    #[test]
    fn the_url_names_the_traces_path_once() {
        assert_eq!(traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://127.0.0.1:4318/"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
    }

    #[test]
    fn a_span_is_encoded_as_otlp_json() {
        let root = SpanContext::root();
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_ne!(child.span_id, root.span_id);
        let at = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let span = Span {
            context: child,
            parent: Some(root.span_id),
            name: "execute_tool create_decision".into(),
            kind: Kind::Internal,
            start: at,
            end: at + Duration::from_millis(3),
            attributes: vec![("gen_ai.tool.name", Attr::Text("create_decision".into())), ("http.response.status_code", Attr::Int(201))],
            error: true,
        };
        let body = encode(&json!({ "attributes": [] }), &[span]);
        let out = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(out["traceId"], hex::encode(root.trace_id));
        assert_eq!(out["parentSpanId"], hex::encode(root.span_id));
        assert_eq!(out["kind"], 1);
        assert_eq!(out["startTimeUnixNano"], "1700000000123456789");
        assert_eq!(out["endTimeUnixNano"], "1700000000126456789");
        assert_eq!(out["attributes"][1], json!({ "key": "http.response.status_code", "value": { "intValue": "201" } }));
        assert_eq!(out["status"], json!({ "code": 2 }));
    }
}
