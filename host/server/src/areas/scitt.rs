//! SCRAPI over HTTP: `POST /entries` registers a signed statement,
//! `GET /entries/{entry_id}` answers its receipt or that it is still
//! running. Bodies are COSE; refusals are concise problem details (RFC
//! 9290, CBOR) with SCRAPI's titles. The rules are `anchor_app::scitt`'s.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use anchor_app::scitt::{self, Registration, codes};

use crate::error::{ApiError, concise_problem};
use crate::extract::ApiPath;
use crate::openapi::*;
use crate::state::AppState;

const TAG: &str = "Log";
const PROBLEM: &str = "application/concise-problem-details+cbor";

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::POST, "/entries", post(register))
            .tag(TAG)
            .summary("Register a signed statement (SCRAPI): it becomes a leaf of the log and gets a COSE receipt")
            .describe(REGISTRATION)
            .extension()
            .takes_bytes("application/cose")
            .ok_media(201, "Registered and under a signed checkpoint: the COSE receipt (Location names the entry)", "application/cose")
            .ok_media(303, "Registered, waiting for its checkpoint: poll Location after Retry-After seconds", "application/cose")
            .ok_media(
                400,
                "Outside the registration policy: Invalid Signed Statement, Bad Signature Algorithm, Payload Missing or Rejected",
                PROBLEM,
            )
            .ok_media(413, "Larger than 64 KiB", PROBLEM)
            .ok_media(415, "Not sent as application/cose", PROBLEM)
            .ok_media(429, "Too many requests from this client (Retry-After)", PROBLEM)
            .ok_media(503, "The database cannot take it now (Retry-After); nothing was registered", PROBLEM),
        op(Method::GET, "/entries/{entry_id}", get(entry))
            .tag(TAG)
            .summary("A registered statement's COSE receipt, or 302 while its registration is running (SCRAPI)")
            .describe(
                "entry_id is the 64 hex digits of SHA-256 of the statement as the tagged COSE_Sign1 18([protected, {}, payload, \
                 signature]), as Location names it. 200 with the receipt once a signed checkpoint covers the statement's leaf \
                 (the checkpoint with the strongest evidence: time-stamped, else witnessed, else signed); 302 to itself with \
                 Retry-After before.",
            )
            .extension()
            .path_described::<String>("entry_id", "64 hex digits")
            .ok_media(200, "The COSE receipt", "application/cose")
            .ok_media(302, "Registration is running: retry after Retry-After seconds", "application/cose")
            .ok_media(400, "Invalid locator: not 64 hex digits", PROBLEM)
            .ok_media(404, "Not Found: no statement is registered with this entry id", PROBLEM)
            .ok_media(429, "Too many requests from this client (Retry-After)", PROBLEM)
            .ok_media(503, "The database cannot answer now (Retry-After)", PROBLEM),
    ]
}

const REGISTRATION: &str = "The body is a signed statement (RFC 9943): a COSE_Sign1, tagged or not, at most 64 KiB, signed with ES256, \
     whose protected header holds a kid and CWT claims (15) with an issuer (1) and a subject (2), text of 1 to 1,024 bytes, and \
     whose payload is attached. It is registered when its issuer is one the operator allows (--scitt-issuer) and the issuer's key \
     its kid names (the key's RFC 9679 thumbprint, or the kid its COSE_Key carries) signed it, and within its CWT validity: \
     an exp (4) at or before the service's clock, or an nbf (5) after it, is Rejected (a statement registered while valid stays \
     its entry). The payload is hashed, never kept: \
     the log's leaf is the text anchor-statement/1\\nsha256:<entry_id>\\n, entry_id being the hex SHA-256 of the statement as \
     18([protected, {}, payload, signature]) (the unprotected header left out), and it enters the same tree as the declarations, \
     under the same checkpoints, witnesses and time stamps. Registering the same statement again is the same entry. Refusals \
     are concise problem details: {-1: title, -2: detail, \"error_code\": code}.";

/// SCRAPI's title for a refusal's code; other refusals take their status's name.
fn title(code: &str) -> Option<&'static str> {
    Some(match code {
        codes::MALFORMED => "Invalid Signed Statement",
        codes::BAD_ALGORITHM => "Bad Signature Algorithm",
        codes::PAYLOAD_MISSING => "Payload Missing",
        codes::REJECTED => "Rejected",
        codes::INVALID_LOCATOR => "Invalid locator",
        codes::NOT_FOUND => "Not Found",
        codes::TOO_LARGE => "Payload Too Large",
        _ => return None,
    })
}

async fn refused(error: impl Into<ApiError>) -> Response {
    concise_problem(error.into().into_response(), title).await
}

fn cose_media(headers: &HeaderMap) -> bool {
    let media = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    media.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/cose")
}

fn location(state: &AppState, entry_id: &[u8; 32]) -> HeaderValue {
    HeaderValue::from_str(&format!("{}/entries/{}", state.settings.config.public_url, hex::encode(entry_id)))
        .unwrap_or_else(|_| HeaderValue::from_static("/entries"))
}

/// The answer for a registration: the receipt with `done`, or the running
/// status (`running`: 303 after a POST, 302 for a GET) with Retry-After.
fn answer(state: &AppState, registration: Registration, done: StatusCode, running: StatusCode) -> Response {
    let (status, entry_id, body) = match registration {
        Registration::Done { entry_id, receipt } => (done, entry_id, receipt),
        Registration::Pending { entry_id } => (running, entry_id, Vec::new()),
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/cose"));
    headers.insert(header::LOCATION, location(state, &entry_id));
    if status == running {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

async fn register(State(state): State<AppState>, request: Request) -> Response {
    if !cose_media(request.headers()) {
        let (_, body) = request.into_parts();
        tokio::spawn(crate::listener::discard(body, std::time::Duration::from_secs(30)));
        return refused(ApiError::Protocol {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "UNSUPPORTED_MEDIA_TYPE",
            message: "send the signed statement with Content-Type: application/cose".into(),
            allow: None,
        })
        .await;
    }
    let body = http_body_util::Limited::new(request.into_body(), scitt::MAX_STATEMENT_BYTES);
    let statement = match http_body_util::BodyExt::collect(body).await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            let mut response = refused(ApiError::Protocol {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: codes::TOO_LARGE,
                message: format!("a signed statement is at most {} bytes here", scitt::MAX_STATEMENT_BYTES),
                allow: None,
            })
            .await;
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Err(_) => {
            return refused(ApiError::Protocol {
                status: StatusCode::BAD_REQUEST,
                code: "INVALID_BODY",
                message: "the body could not be read".into(),
                allow: None,
            })
            .await;
        }
    };
    let key = match state.published_receipt_key().await {
        Ok(key) => key,
        Err(error) => return refused(error).await,
    };
    match scitt::register(&state.app, key, &statement).await {
        Ok(registration) => answer(&state, registration, StatusCode::CREATED, StatusCode::SEE_OTHER),
        Err(error) => refused(error).await,
    }
}

async fn entry(State(state): State<AppState>, path: Result<ApiPath<String>, ApiError>) -> Response {
    let found = async {
        let ApiPath(entry_id) = path?;
        let entry_id = scitt::entry_id(&entry_id)?;
        let key = state.published_receipt_key().await?;
        Ok::<_, ApiError>(scitt::entry_status(&state.app, key, &entry_id).await?)
    };
    match found.await {
        Ok(registration) => answer(&state, registration, StatusCode::OK, StatusCode::FOUND),
        Err(error) => refused(error).await,
    }
}
