//! What each tool does: its arguments read into the operation's request
//! type (in its area, `areas/`), the operation run (it calls the use case), its answer
//! returned: what the REST route's handler does with the same operation.

use axum::response::IntoResponse;
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::{Map, Value, json};

use anchor_app::charge::Offered;
use anchor_app::declarations::Form;

use crate::areas::{account, agents, ara, bilateral, declarations, discovery, dur, earned, ise, sdac, tsl};
use crate::error::{ApiError, AuthFailure};
use crate::state::AppState;

/// Why a tool call produced no result: what the REST route would have
/// answered instead of its body.
pub enum Failure {
    Refused(ApiError),
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Failure {
        Failure::Refused(error)
    }
}

impl From<anchor_app::AppError> for Failure {
    fn from(error: anchor_app::AppError) -> Failure {
        Failure::Refused(ApiError::App(error))
    }
}

impl From<crate::body::ReadError> for Failure {
    fn from(error: crate::body::ReadError) -> Failure {
        Failure::Refused(error.into())
    }
}

/// A tool's answer: the body its route would send, and the settlement of
/// the x402 payment it took, if it took one (with when it settled, where
/// that was not the moment of the answer).
pub struct Answer {
    pub value: Value,
    pub settlement: Option<anchor_app::charge::Settlement>,
    pub settled_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub type Outcome = Result<Answer, Failure>;

fn body(value: impl Serialize) -> Outcome {
    paid((value, None))
}

/// A body and the settlement of the payment that bought it.
fn paid((value, settlement): (impl Serialize, Option<anchor_app::charge::Settlement>)) -> Outcome {
    let value = serde_json::to_value(value).map_err(|e| Failure::Refused(ApiError::App(anchor_app::AppError::Internal(e.into()))))?;
    Ok(Answer { value, settlement, settled_at: None })
}

/// Runs one tool whose arguments fit its schema.
pub async fn call(
    state: &AppState,
    tool: &str,
    mut arguments: Map<String, Value>,
    bearer: Option<String>,
    trace: Option<anchor_domain::trace::TraceId>,
) -> Outcome {
    match tool {
        "register_agent" => return body(agents::register_agent(state, read(arguments)?).await?),
        "get_documentation" => {
            return body(json!({ "format": "text/markdown", "documentation": discovery::llms_text(state) }));
        }
        // The market's list is public, as its route is.
        "list_tools" => return body(tsl::list_tools(state, read(arguments)?).await?),
        // Anonymous: whoever sends it, no credential is read or kept.
        "submit_feedback" => return submit_feedback(state, arguments).await,
        _ => {}
    }
    let token = token_of(state, &mut arguments, bearer)?;
    if tool == "confirm_decision" {
        // The token and the declaration in one read, as the REST route reads
        // them; an argument that does not read is refused after the token.
        let dd_id = uuid_argument(&arguments, "dd_id");
        let (agent, read) = match &dd_id {
            Ok(dd_id) => anchor_app::declarations::authenticate_to_confirm(&state.app, &token, *dd_id).await?,
            Err(_) => (anchor_app::agents::authenticate(&state.app, &token).await?, None),
        };
        let agent = agent.ok_or_else(|| unauthorized(state, AuthFailure::InvalidToken))?;
        let (confirmed, settlement, settled_at) = match declarations::confirm_decision(state, &agent, dd_id?, read).await {
            // A remembered token found no longer the agent's when read again.
            Err(ApiError::App(anchor_app::AppError::TokenRefused)) => return Err(unauthorized(state, AuthFailure::InvalidToken)),
            confirmed => confirmed?,
        };
        let answer = paid((confirmed, settlement))?;
        return Ok(Answer { settled_at: Some(settled_at.0), ..answer });
    }
    let agent = match anchor_app::agents::authenticate(&state.app, &token).await? {
        Some(agent) => agent,
        None => return Err(unauthorized(state, AuthFailure::InvalidToken)),
    };
    match tool {
        "create_decision" => {
            let offered = offer(&mut arguments);
            let request = create_request(arguments);
            let found = anchor_ports::FoundAgent { agent, remembered: false };
            body(declarations::create_decision(state, &found, offered, crate::body::read(&request)?, Form::Flat, trace).await?)
        }
        "get_decision" => {
            let dd_id = uuid_argument(&arguments, "dd_id")?;
            body(declarations::decision_detail(state, &agent, dd_id).await?)
        }
        "list_decisions" => body(declarations::list_decisions(state, &agent, read(arguments)?).await?),
        "propose_bilateral" => {
            let offered = offer(&mut arguments);
            // counterparty_agent_id stays at the top, beside dd and ee.
            let request = create_request(arguments);
            body(bilateral::propose_agreement(state, &agent, offered, crate::body::read(&request)?, Form::Flat).await?)
        }
        "create_ise_session" => body(ise::enter_stay(state, &agent, read(arguments)?).await?),
        "get_ise_status" => body(ise::stay_status(state, &agent).await?),
        "exit_ise_session" => {
            let offered = offer(&mut arguments);
            paid(ise::exit_stay(state, &agent, offered).await?)
        }
        "get_dac_balance" => body(earned::balance_of(state, &agent).await?),
        "create_sdac_session" => body(sdac::start_session(state, &agent).await?),
        "run_sdac_trial" => {
            let session_id = arguments.remove("session_id").unwrap_or(Value::Null);
            let request = json!({ "session_id": session_id, "ee": Value::Object(arguments) });
            body(sdac::run_trial(state, &agent, crate::body::read(&request)?).await?)
        }
        "get_sdac_session" => {
            let session_id = uuid_argument(&arguments, "session_id")?;
            body(sdac::session_history(state, &agent, session_id).await?)
        }
        "end_sdac_session" => {
            let offered = offer(&mut arguments);
            let session_id = uuid_argument(&arguments, "session_id")?;
            paid(sdac::end_session(state, &agent, session_id, offered).await?)
        }
        "get_agent_profile" => {
            let offered = offer(&mut arguments);
            // The reference's tool names no level: the use case's default (1), surcharge-free.
            let target = uuid_argument(&arguments, "agent_id")?;
            let ask = anchor_app::ara::agents::Ask::new(target, None, anchor_app::ara::PremiumSource::External, offered);
            paid(ara::agent_profile(state, &agent, ask).await?)
        }
        "get_dac_ur" => body(dur::usage_summary(state, &agent, read(arguments)?).await?),
        "compare_anomaly" => {
            let offered = offer(&mut arguments);
            paid(ara::anomaly_compare_of(state, &agent, offered, read(arguments)?).await?)
        }
        "get_evidence_report" => {
            let offered = offer(&mut arguments);
            let dd_id = uuid_argument(&arguments, "dd_id")?;
            paid(ara::evidence_report_of(state, &agent, offered, dd_id).await?)
        }
        "get_environment_anomaly" => {
            let offered = offer(&mut arguments);
            paid(ara::environment_anomaly_of(state, &agent, offered, read(arguments)?).await?)
        }
        "register_tool" => body(tsl::register_tool(state, &agent, read(arguments)?).await?),
        "purchase_tool" => {
            let offered = offer(&mut arguments);
            let purchased = tsl::buy_tool(state, &agent, offered, read(arguments)?).await?;
            paid((tsl::purchase_view(&purchased), purchased.settlement.clone()))
        }
        "observe_pattern" => {
            let offered = offer(&mut arguments);
            let kind = match arguments.get("type").and_then(Value::as_str) {
                Some("action-type") => anchor_app::ara::releases::Kind::ActionType,
                _ => anchor_app::ara::releases::Kind::EeDistribution,
            };
            paid(ara::observe_pattern(state, &agent, offered, kind).await?)
        }
        "observe_environment" => {
            let offered = offer(&mut arguments);
            paid(ara::observe_environment(state, &agent, offered).await?)
        }
        "get_decision_metadata_distribution" => {
            // Free, as its route is: a payment offered for it is not needed.
            arguments.remove("payment_signature");
            body(dur::metadata_distribution(state, &agent, read(arguments)?).await?)
        }
        "get_self_classification_distribution" => body(dur::classification_distribution(state, &agent, read(arguments)?).await?),
        "get_trial_status" => body(account::TrialStatus::from(anchor_app::agents::trial(&state.app, &agent))),
        "list_classifications" => body(account::classifications_of(state, &agent).await?),
        other => Err(Failure::Refused(ApiError::bad("INVALID_VALUE", format!("no tool named {}", anchor_domain::brief(other))))),
    }
}

/// The tool's arguments read as its REST route reads its body (or query).
fn read<T: serde::de::DeserializeOwned>(arguments: Map<String, Value>) -> Result<T, Failure> {
    Ok(crate::body::read(&Value::Object(arguments))?)
}

/// The agent's token: the `auth_token` argument, else the MCP request's
/// bearer credential (trimmed).
fn token_of(state: &AppState, arguments: &mut Map<String, Value>, bearer: Option<String>) -> Result<String, Failure> {
    match arguments.remove("auth_token") {
        Some(Value::String(token)) => Ok(token.trim().to_string()),
        _ => bearer.map(|token| token.trim().to_string()).ok_or_else(|| unauthorized(state, AuthFailure::Missing)),
    }
}

fn unauthorized(state: &AppState, failure: AuthFailure) -> Failure {
    Failure::Refused(ApiError::Unauthorized { failure, base_url: state.settings.config.public_url.clone() })
}

/// The payment a `payment_signature` argument carries (what a
/// PAYMENT-SIGNATURE header would).
fn offer(arguments: &mut Map<String, Value>) -> Offered {
    match arguments.remove("payment_signature") {
        Some(Value::String(text)) => match anchor_x402::decode_payload("payment_signature", &text) {
            Ok(payload) => Offered::Payload(payload),
            Err(message) => Offered::Malformed(message),
        },
        _ => Offered::None,
    }
}

fn uuid_argument(arguments: &Map<String, Value>, name: &str) -> Result<uuid::Uuid, Failure> {
    let text = arguments.get(name).and_then(Value::as_str).unwrap_or_default();
    crate::body::path_uuid(name, text).map_err(Failure::Refused)
}

const DD_FIELDS: &[&str] = &[
    "dd_unit_type",
    "decision_type",
    "decision_action_type",
    "origin_context_type",
    "selection_state",
    "selection_scope",
    "decision_at",
    "parent_dd_id",
];
const EE_FIELDS: &[&str] = &[
    "ee_preset",
    "ee_retention_period",
    "ee_integrity_verification_level",
    "ee_disclosure_format_policy",
    "ee_responsibility_scope",
    "ee_direct_access_period",
    "ee_direct_access_quota",
    "access_class",
    "content_disclosure_scope",
    "delegation_state",
];

/// The body POST /v1/dd/create (or bilateral/propose) would receive for the
/// tool's flat arguments: the dd and ee objects, and a request_id made up
/// when none is given. What the flat shape may leave out is the use case's
/// to default ([`Form::Flat`]), as the mode of the tool that was called is.
pub fn create_request(mut arguments: Map<String, Value>) -> Value {
    let mut take = |names: &[&str]| -> Map<String, Value> {
        names.iter().filter_map(|name| arguments.remove(*name).map(|value| (name.to_string(), value))).collect()
    };
    let (dd, ee) = (take(DD_FIELDS), take(EE_FIELDS));
    let request_id = arguments.remove("request_id").unwrap_or_else(|| json!(uuid::Uuid::new_v4()));
    let mut request = arguments;
    request.insert("request_id".into(), request_id);
    request.insert("dd".into(), Value::Object(dd));
    request.insert("ee".into(), Value::Object(ee));
    Value::Object(request)
}

/// submit_feedback: a note kept with nothing that names its sender.
async fn submit_feedback(state: &AppState, mut arguments: Map<String, Value>) -> Outcome {
    let mut text = |name: &str| arguments.remove(name).and_then(|v| v.as_str().map(str::to_string));
    let feedback = anchor_domain::records::Feedback {
        note: text("note"),
        would_recommend: text("would_recommend"),
        recommend_reason: text("recommend_reason"),
        would_report_to_operator: text("would_report_to_operator"),
        report_reason: text("report_reason"),
        would_keep_as_tool: text("would_keep_as_tool"),
        keep_reason: text("keep_reason"),
        tools_used: match arguments.remove("tools_used") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Failure::Refused(ApiError::bad("INVALID_VALUE", "tools_used holds tool names (strings)")))?,
            _ => Vec::new(),
        },
    };
    anchor_app::feedback::submit(&state.app, &feedback).await?;
    body(json!({
        "received": true,
        "message": "Thank you. The note was kept without anything that names you: no agent id, token, address or time of day.",
    }))
}

/// The tool's answer: the route's body as structured content, or a tool
/// error with the route's status and error (a payment requirement with its
/// challenge and how to pay).
pub async fn render(outcome: Outcome) -> CallToolResult {
    match outcome {
        Ok(answer) => CallToolResult::structured(answer.value),
        Err(Failure::Refused(error)) => {
            let response = error.into_response();
            let status = response.status().as_u16();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap_or_default();
            let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if status == 402 && answer.get("accepts").is_some() {
                let how = "Sign one of accepts with an x402 client and call this tool again with its base64 payload as payment_signature.";
                let mut result = CallToolResult::structured_error(json!({
                    "status": 402,
                    "error_code": "PAYMENT_REQUIRED",
                    "message": how,
                    "payment_required": answer,
                }));
                result.content.push(ContentBlock::text(how));
                return result;
            }
            let mut refusal = match answer {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            refusal.insert("status".into(), json!(status));
            CallToolResult::structured_error(Value::Object(refusal))
        }
    }
}
