//! The verifiable log over HTTP: signed checkpoints, receipts with inclusion
//! proofs, consistency proofs, the public key and C2SP tlog-tiles.

use crate::extract::{ApiPath, ApiQuery};
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use anchor_domain::integrity::canonical_encoding;
use anchor_verify::{ConsistencyProof, RECEIPT_FORMAT, Receipt};

use super::input::path_uuid;
use crate::error::{ApiError, ApiResult};
use crate::extract::AuthAgent;
use crate::openapi::*;
use crate::state::AppState;
use anchor_app::log;

pub fn operations() -> Vec<Operation> {
    vec![
        op(Method::GET, "/v1/dd/{dd_id}/receipt", get(receipt))
            .tag("Log")
            .summary("A receipt that proves a confirmed declaration is in the signed log")
            .describe("Owner only: it carries the record's salt. `anchor verify` checks it offline.")
            .agent()
            .extension()
            .path_param("dd_id", uuid())
            .ok(
                200,
                "Receipt",
                object(
                    &[],
                    vec![
                        ("format", string()),
                        ("dd_id", uuid()),
                        ("canonical_record", doc(string(), "The anchor-dd/1 encoding, salt included")),
                        ("integrity_hash", string()),
                        ("anchored_at", datetime()),
                        ("leaf_index", integer()),
                        ("tree_size", integer()),
                        ("inclusion_proof", array(string())),
                        ("checkpoint", doc(string(), "C2SP signed note")),
                    ],
                ),
            )
            .error(400, "dd_id is not a UUID.", &["INVALID_UUID"])
            .error(403, "Another agent's record.", &["FORBIDDEN"])
            .error(404, "No such record.", &["DD_NOT_FOUND"])
            .error(409, "Not confirmed, or not yet in a signed checkpoint (retry shortly).", &["NOT_CONFIRMED", "NOT_YET_IN_LOG"]),
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
            .path_param("size", json!({ "type": "integer", "minimum": 0 }))
            .ok_media(200, "The checkpoint, as a signed note", "text/plain")
            .error(400, "size is not a whole number.", &["INVALID_VALUE"])
            .error(404, "No checkpoint was published for this size.", &["NOT_FOUND"]),
        op(Method::GET, "/v1/log/consistency", get(consistency))
            .tag("Log")
            .summary("An RFC 6962 consistency proof between two tree sizes")
            .extension()
            .required_query("from", json!({ "type": "integer", "minimum": 0 }))
            .required_query("to", json!({ "type": "integer", "minimum": 0 }))
            .ok(200, "Proof", object(&[], vec![("from_size", integer()), ("to_size", integer()), ("proof", array(string()))]))
            .error(400, "Sizes out of range.", &["INVALID_VALUE"]),
        op(Method::GET, "/v1/log/key", get(key)).tag("Log").summary("The log's origin and public key (C2SP verifier key)").extension().ok(
            200,
            "Key",
            object(&[], vec![("origin", string()), ("public_key", string())]),
        ),
        op(Method::GET, "/v1/log/tile/{*path}", get(tile))
            .tag("Log")
            .summary("C2SP tlog-tiles: hash tiles (<L>/<N>[.p/<W>]) and entry bundles (entries/<N>[.p/<W>])")
            .extension()
            .path_param("path", doc(string(), "The tile path below tile/; may contain slashes"))
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

async fn receipt(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    ApiPath(dd_id): ApiPath<String>,
) -> ApiResult<axum::Json<Value>> {
    let dd_id = path_uuid("dd_id", &dd_id)?;
    let stored = super::declarations::owned(&state, &agent, dd_id).await?;
    let Some(integrity_hash) = stored.integrity_hash.clone() else {
        return Err(ApiError::conflict("NOT_CONFIRMED", "confirm the declaration first; only confirmed declarations enter the log"));
    };
    let not_yet =
        || ApiError::conflict("NOT_YET_IN_LOG", "the declaration is confirmed but not yet in a signed checkpoint; retry in a second");
    let (index, _leaf) = state.store.log_entry_for(dd_id).await?.ok_or_else(not_yet)?;
    let checkpoint = state.store.latest_checkpoint().await?.filter(|c| c.size > index).ok_or_else(not_yet)?;
    let proof = log::inclusion_proof(state.store.as_ref(), checkpoint.size as u64, index as u64)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("no inclusion proof for leaf {index} in tree {}", checkpoint.size)))?;
    let receipt = Receipt {
        format: RECEIPT_FORMAT.into(),
        dd_id: dd_id.to_string(),
        canonical_record: canonical_encoding(&stored.declaration),
        integrity_hash,
        anchored_at: stored.declaration.anchored_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        leaf_index: index as u64,
        tree_size: checkpoint.size as u64,
        inclusion_proof: proof.iter().map(|h| B64.encode(h.0)).collect(),
        checkpoint: checkpoint.note,
    };
    Ok(axum::Json(serde_json::to_value(receipt).map_err(ApiError::internal)?))
}

async fn latest_checkpoint(State(state): State<AppState>) -> ApiResult<Response> {
    match state.store.latest_checkpoint().await? {
        Some(c) => Ok(text(c.note, "max-age=1")),
        None => Err(ApiError::not_found("NOT_FOUND", "no checkpoint has been published yet: the log is empty")),
    }
}

async fn checkpoint_at(State(state): State<AppState>, ApiPath(size): ApiPath<String>) -> ApiResult<Response> {
    let size: i64 = size.parse().map_err(|_| ApiError::bad("INVALID_VALUE", "size must be a whole number"))?;
    match state.store.checkpoint(size).await? {
        Some(c) => Ok(text(c.note, "public, max-age=31536000, immutable")),
        None => Err(ApiError::not_found("NOT_FOUND", format!("no checkpoint was published for size {size}"))),
    }
}

async fn consistency(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<std::collections::HashMap<String, String>>,
) -> ApiResult<axum::Json<Value>> {
    let size = |name: &str| -> ApiResult<u64> {
        query.get(name).and_then(|v| v.parse().ok()).ok_or_else(|| ApiError::bad("INVALID_VALUE", format!("{name} must be a tree size")))
    };
    let (from, to) = (size("from")?, size("to")?);
    let current = state.store.log_state().await?.size as u64;
    if from > to || to > current {
        return Err(ApiError::bad("INVALID_VALUE", format!("need from <= to <= {current} (the current tree size)")));
    }
    let proof = if from == to || from == 0 {
        Vec::new()
    } else {
        log::consistency_proof(state.store.as_ref(), to, from)
            .await
            .map_err(ApiError::internal)?
            .ok_or_else(|| ApiError::internal(anyhow::anyhow!("no consistency proof {from} -> {to}")))?
    };
    let proof = ConsistencyProof { from_size: from, to_size: to, proof: proof.iter().map(|h| B64.encode(h.0)).collect() };
    Ok(axum::Json(serde_json::to_value(proof).map_err(ApiError::internal)?))
}

async fn key(State(state): State<AppState>) -> axum::Json<Value> {
    axum::Json(json!({ "origin": state.log_key.origin, "public_key": state.log_key.vkey }))
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
    let size = state.store.log_state().await?.size as u64;
    // A tile exists once the tree covers all of it: W hashes at level 8L, each
    // standing for 2^(8L) leaves.
    let span = 1u64.checked_shl(8 * u32::from(tile.level())).ok_or_else(bad)?;
    let covered = tile
        .level_index()
        .checked_mul(256)
        .and_then(|n| n.checked_add(u64::from(tile.width())))
        .and_then(|n| n.checked_mul(span))
        .ok_or_else(bad)?;
    if covered > size {
        return Err(bad());
    }
    let body = if entries {
        let first = (tile.level_index() * 256) as i64;
        let leaves = state.store.log_entries(first, i64::from(tile.width())).await?;
        if leaves.len() != tile.width() as usize {
            return Err(bad());
        }
        let mut bundle = Vec::new();
        for leaf in leaves {
            bundle.extend_from_slice(&(leaf.len() as u16).to_be_bytes());
            bundle.extend_from_slice(&leaf);
        }
        bundle
    } else {
        log::tile_data(state.store.as_ref(), tile).await.map_err(ApiError::internal)?.ok_or_else(bad)?
    };
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
