//! The verifiable log over HTTP: signed checkpoints, receipts with inclusion
//! proofs, consistency proofs, the public key and C2SP tlog-tiles. The reads
//! are `anchor_app::transparency`'s.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use anchor_app::transparency;
use anchor_verify::{ConsistencyProof, Receipt};

use crate::body::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, AuthAgent};
use crate::openapi::*;
use crate::state::AppState;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/dd/{dd_id}/receipt", get(receipt))
            .tag("Log")
            .summary("A receipt that proves a confirmed declaration is in the signed log")
            .describe(
                "Owner only: it carries the record's salt. `anchor verify` checks it offline. With Accept: application/cose (or \
                 application/scitt-receipt+cose) the same proof comes as a COSE Receipt (RFC 9942, vds 1 RFC9162_SHA256), as at \
                 /v1/dd/{dd_id}/receipt.cose.",
            )
            .agent()
            .extension()
            .path::<Uuid>("dd_id")
            .returns::<Receipt>(
                200,
                "Receipt: the anchor-dd/1 record (salt included), its leaf, the inclusion proof and the signed checkpoint",
            )
            .or_media(200, "application/cose")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"])
            .error(409, "Not confirmed, or not yet in a signed checkpoint (retry shortly).", &["NOT_CONFIRMED", "NOT_YET_IN_LOG"]),
        op(Method::GET, "/v1/dd/{dd_id}/evidence", get(evidence))
            .tag("Log")
            .summary("A dispute-evidence bundle: the declared scope, its proof in the log, and the payments made for it")
            .describe(
                "Owner only: it carries the record's salt. One self-contained file (anchor-evidence/1): the record as declared \
                 (DD and EE, when it was anchored) in its receipt (inclusion proof to a signed checkpoint, with the witnesses' \
                 cosignatures and time-stamp when it has them, and the COSE receipt), and for each settled x402 payment the \
                 payer's authorization, the signed offer of its terms, the signed receipt of its settlement and the service's \
                 binding of that settlement to the record, signed with the log key. `anchor verify --evidence FILE` checks it \
                 offline (scope, proof, order, payment).",
            )
            .agent()
            .extension()
            .path::<Uuid>("dd_id")
            .returns::<anchor_verify::evidence::Evidence>(200, "The anchor-evidence/1 bundle")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"])
            .error(409, "Not confirmed, or not yet in a signed checkpoint (retry shortly).", &["NOT_CONFIRMED", "NOT_YET_IN_LOG"]),
        op(Method::GET, "/v1/dd/{dd_id}/receipt.cose", get(receipt_cose))
            .tag("Log")
            .summary("The receipt as a COSE Receipt (RFC 9942): for SCITT verifiers")
            .describe(COSE_RECEIPT)
            .agent()
            .extension()
            .path::<Uuid>("dd_id")
            .ok_media(200, "The COSE Receipt (a tagged COSE_Sign1, payload detached)", "application/cose")
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(410, "The record is past its retention period and was de-identified.", &["RECORD_DEIDENTIFIED"])
            .error(
                409,
                "Not confirmed, not yet in a signed checkpoint, or the tree holds one leaf only (retry shortly).",
                &["NOT_CONFIRMED", "NOT_YET_IN_LOG"],
            ),
        op(Method::GET, "/v1/log/consistency.cose", get(consistency_cose))
            .tag("Log")
            .summary("A COSE consistency receipt (RFC 9942, vds 1) between two signed checkpoints")
            .describe(
                "Its payload (detached) is the root of the newer checkpoint, its proof (396 / -2) [from, to, path]; both \
                 checkpoints travel under private labels -70005 (older) and -70001 (newer). Sizes are those of signed checkpoints.",
            )
            .extension()
            .query::<ConsistencyQuery>()
            .ok_media(200, "The COSE consistency receipt", "application/cose")
            .error(400, "Sizes missing, out of range, or not 0 < from < to.", &["INVALID_VALUE", "MISSING_FIELD"])
            .error(404, "The log signed no checkpoint of one of the sizes.", &["CHECKPOINT_NOT_FOUND"]),
        op(Method::GET, "/.well-known/scitt-keys", get(receipt_keys))
            .tag("Log")
            .summary("The keys COSE receipts are signed with: a COSE Key Set (SCRAPI key discovery)")
            .describe(
                "Every key a host of this service has signed receipts with, retired ones included, as EC2 P-256 COSE_Keys whose \
                 kid is the RFC 9679 thumbprint receipts name in their protected header.",
            )
            .extension()
            .ok_media(200, "The COSE Key Set (CBOR)", "application/cbor"),
        op(Method::GET, "/.well-known/scitt-keys/{kid}", get(receipt_key))
            .tag("Log")
            .summary("One receipt key by its kid (base64url, no padding)")
            .extension()
            .path::<String>("kid")
            .ok_media(200, "The COSE_Key (CBOR)", "application/cbor")
            .ok_media(
                404,
                "No key has this kid: concise problem details (RFC 9290) with the code NOT_FOUND",
                "application/concise-problem-details+cbor",
            ),
        op(Method::GET, "/v1/log/checkpoint", get(latest_checkpoint))
            .tag("Log")
            .summary("The latest signed checkpoint (C2SP tlog-checkpoint, signed note)")
            .extension()
            .ok_media(200, "The checkpoint, as a signed note", "text/plain")
            .error(404, "No checkpoint has been published yet.", &["NOT_FOUND"]),
        op(Method::GET, "/v1/log/checkpoints/{size}", get(checkpoint_at))
            .tag("Log")
            .summary("The signed checkpoint published for a tree size")
            .extension()
            .path::<u64>("size")
            .ok_media(200, "The checkpoint, as a signed note", "text/plain")
            .error(400, "size is not a whole number.", &["INVALID_VALUE"])
            .error(404, "No checkpoint was published for this size.", &["NOT_FOUND"]),
        op(Method::GET, "/v1/log/consistency", get(consistency))
            .tag("Log")
            .summary("An RFC 6962 consistency proof between two tree sizes")
            .extension()
            .query::<ConsistencyQuery>()
            .returns::<ConsistencyProof>(200, "Proof")
            .error(400, "Sizes missing or out of range.", &["INVALID_VALUE", "MISSING_FIELD"]),
        op(Method::GET, "/v1/log/key", get(key))
            .tag("Log")
            .summary("The log's origin and public key (C2SP verifier key)")
            .extension()
            .returns::<LogKeyView>(200, "Key"),
        op(Method::GET, "/v1/log/tile/{*path}", get(tile))
            .tag("Log")
            .summary("C2SP tlog-tiles: hash tiles (<L>/<N>[.p/<W>]) and entry bundles (entries/<N>[.p/<W>])")
            .extension()
            .path_described::<String>("path", "The tile path below tile/; may contain slashes")
            .ok_media(200, "The tile or entry bundle", "application/octet-stream")
            .error(404, "No such tile (malformed, out of range, or not yet complete).", &["NOT_FOUND"]),
    ]
}

fn text(body: String, cache: &'static str) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

const COSE_RECEIPT: &str = "Owner only. A tagged COSE_Sign1 signed with ES256: protected header alg -7, kid (the key's RFC 9679 \
     thumbprint, its key at /.well-known/scitt-keys), vds 395 = 1 (RFC9162_SHA256) and CWT claims 15 {1: iss (this service), 2: \
     sub (urn:uuid:<dd_id>), 6: iat (the checkpoint's time)}; unprotected 396 {-1: [bstr .cbor [tree_size, leaf_index, path]]}. \
     The payload is detached: it is the Merkle root a verifier recomputes from the leaf and the path (RFC 9162, leaf hash \
     SHA-256(0x00 || leaf)). The leaf of a declaration is the UTF-8 text anchor-leaf/1\\n<integrity_hash>\\n<anchored_at>\\n, \
     where integrity_hash is sha256: and the hex SHA-256 of the record's anchor-dd/1 canonical encoding. Private labels carry \
     the integrity level through the envelope: -70001 the checkpoint (a C2SP signed note with the witnesses' cosignatures), \
     -70002 the RFC 3161 token over its body when stamped, -70003 the leaf bytes, -70004 the canonical record.";

/// Whether the client asks for a COSE receipt: application/cose (or the
/// SCITT receipt type) before, or without, application/json.
fn wants_cose(headers: &axum::http::HeaderMap) -> bool {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let cose = ["application/cose", "application/scitt-receipt+cose"].iter().filter_map(|m| accept.find(m)).min();
    match (cose, accept.find("application/json")) {
        (Some(cose), Some(json)) => cose < json,
        (Some(_), None) => true,
        _ => false,
    }
}

fn cose(bytes: Vec<u8>, cache: &'static str) -> Response {
    let mut response = bytes.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/cose"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

async fn receipt(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
    headers: axum::http::HeaderMap,
) -> ApiResult<Response> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    if wants_cose(&headers) {
        let key = state.published_receipt_key().await?;
        return Ok(cose(transparency::cose_receipt(&state.app, key, agent.agent_id, dd_id).await?, "private, no-store"));
    }
    Ok(Json(transparency::receipt(&state.app, agent.agent_id, dd_id).await?).into_response())
}

async fn evidence(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiPath(dd_id): ApiPath<String>) -> ApiResult<Response> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let key = state.published_receipt_key().await?;
    let bundle = transparency::evidence(&state.app, Some(key), agent.agent_id, dd_id).await?;
    let mut response = Json(bundle).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("private, no-store"));
    Ok(response)
}

async fn receipt_cose(State(state): State<AppState>, AuthAgent(agent): AuthAgent, ApiPath(dd_id): ApiPath<String>) -> ApiResult<Response> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let key = state.published_receipt_key().await?;
    Ok(cose(transparency::cose_receipt(&state.app, key, agent.agent_id, dd_id).await?, "private, no-store"))
}

async fn consistency_cose(State(state): State<AppState>, ApiQuery(query): ApiQuery<ConsistencyQuery>) -> ApiResult<Response> {
    let key = state.published_receipt_key().await?;
    Ok(cose(transparency::cose_consistency(&state.app, key, query.from, query.to).await?, "public, max-age=60"))
}

fn cbor(bytes: Vec<u8>, media: &'static str) -> Response {
    let mut response = bytes.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    response
}

async fn receipt_keys(State(state): State<AppState>) -> ApiResult<Response> {
    state.published_receipt_key().await?;
    let keys = transparency::receipt_keys(&state.app).await?;
    Ok(cbor(anchor_verify::cose::key_set(&keys), "application/cbor"))
}

async fn receipt_key(State(state): State<AppState>, ApiPath(kid): ApiPath<String>) -> ApiResult<Response> {
    use base64::Engine;
    state.published_receipt_key().await?;
    let wanted = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(kid.trim_end_matches('=')).ok();
    let keys = transparency::receipt_keys(&state.app).await?;
    match keys.into_iter().find(|k| wanted.as_deref() == Some(k.thumbprint().as_slice())) {
        Some(key) => Ok(cbor(key.cose_key(), "application/cbor")),
        None => {
            let problem = anchor_verify::cose::coded_problem("No such key", "No key could be found for this kid value", "NOT_FOUND");
            let mut response = cbor(problem, "application/concise-problem-details+cbor");
            *response.status_mut() = StatusCode::NOT_FOUND;
            Ok(response)
        }
    }
}

async fn latest_checkpoint(State(state): State<AppState>) -> ApiResult<Response> {
    Ok(text(transparency::latest_checkpoint(&state.app).await?, "max-age=1"))
}

async fn checkpoint_at(State(state): State<AppState>, ApiPath(size): ApiPath<String>) -> ApiResult<Response> {
    let size: i64 = size.parse().ok().filter(|s| *s >= 0).ok_or_else(|| ApiError::bad("INVALID_VALUE", "size must be a whole number"))?;
    Ok(text(transparency::checkpoint(&state.app, size).await?, "public, max-age=31536000, immutable"))
}

#[derive(Deserialize, JsonSchema)]
struct ConsistencyQuery {
    /// The older tree size.
    from: u64,
    /// The newer tree size, at most the current one.
    to: u64,
}

async fn consistency(State(state): State<AppState>, ApiQuery(query): ApiQuery<ConsistencyQuery>) -> ApiResult<Json<ConsistencyProof>> {
    Ok(Json(transparency::consistency(&state.app, query.from, query.to).await?))
}

#[derive(Serialize, JsonSchema)]
struct LogKeyView {
    origin: String,
    /// The C2SP verifier key (`origin+hash+key`).
    public_key: String,
}

async fn key(State(state): State<AppState>) -> Json<LogKeyView> {
    Json(LogKeyView { origin: state.log_key.origin.clone(), public_key: state.log_key.vkey.clone() })
}

/// Reads a C2SP tlog-tiles path below `tile/` (`<L>/<N>[.p/<W>]` or
/// `entries/<N>[.p/<W>]`, height 8). The ranges are checked here, before the
/// tile library sees the path: it asserts them (a level of 64 or more, or a
/// partial width of 0, would panic), and a client's URL must never reach an
/// assertion.
pub(crate) fn parse_tile_path(path: &str) -> Option<(tlog_tiles::Tile, bool)> {
    let (level, rest, entries) = match path.strip_prefix("entries/") {
        Some(rest) => (None, rest, true),
        None => {
            let (level, rest) = path.split_once('/')?;
            (Some(level), rest, false)
        }
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(level) = level
        && !(digits(level) && level.parse::<u8>().is_ok_and(|l| l < 64))
    {
        return None;
    }
    if let Some((_, width)) = rest.rsplit_once(".p/")
        && !(digits(width) && width.parse::<u32>().is_ok_and(|w| (1..256).contains(&w)))
    {
        return None;
    }
    let go_path = match level {
        Some(level) => format!("tile/8/{level}/{rest}"),
        None => format!("tile/8/data/{rest}"),
    };
    tlog_tiles::Tile::from_path(&go_path).ok().map(|tile| (tile, entries))
}

async fn tile(State(state): State<AppState>, ApiPath(path): ApiPath<String>) -> ApiResult<Response> {
    let bad = || ApiError::not_found("NOT_FOUND", format!("no tile {}", anchor_domain::brief(&path)));
    let (tile, entries) = parse_tile_path(&path).ok_or_else(bad)?;
    let body = transparency::tile(&state.app, tile, entries).await?.ok_or_else(bad)?;
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    let cache = if tile.width() == 256 { "public, max-age=31536000, immutable" } else { "max-age=1" };
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::parse_tile_path;

    #[test]
    fn tile_paths_out_of_range_are_refused_without_reaching_the_library_assertions() {
        for bad in [
            "0/000.p/0",
            "64/000",
            "99/000",
            "255/000.p/3",
            "0/000.p/256",
            "entries/000.p/0",
            "0/x001/000.p/0",
            "",
            "0",
            "0/",
            "entries/",
            "-1/000",
            "0/000.p/",
            "0/000.p/-1",
            "0/000.p/99999999999999999999999",
        ] {
            assert!(parse_tile_path(bad).is_none(), "{bad:?} parsed");
        }
        let (tile, entries) = parse_tile_path("0/000").unwrap();
        assert_eq!((tile.level(), tile.width(), entries), (0, 256, false));
        let (tile, entries) = parse_tile_path("entries/001.p/7").unwrap();
        assert_eq!((tile.level_index(), tile.width(), entries), (1, 7, true));
        let (tile, _) = parse_tile_path("63/000.p/1").unwrap();
        assert_eq!(tile.level(), 63);
    }
}
