//! `anchor monitor`: follows a running instance's log from the outside.
//!
//! Each run fetches the newest checkpoint, checks the log's signature (and,
//! given witness keys, a quorum of their cosignatures), checks it extends
//! the checkpoint the previous run kept in `--state` (a consistency proof
//! from the service; the same size with another root is a fork, a smaller
//! size a rollback), and that the public hash tiles hash to its root. Then
//! it keeps the new checkpoint. It is meant for cron: exit status 0 when
//! all holds, 1 on an alarm (fork, rollback, bad signature, missing quorum,
//! tiles that disagree), 2 when it could not check (unreachable, malformed
//! answer, unreadable state); the message says which.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

use anchor_verify::cosignature::{WitnessKey, cosignatures};
use anchor_verify::{ConsistencyProof, Failure, open_checkpoint};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use tlog_tiles::{Hash, Tile, TileHashReader, TileReader, tree_hash};

/// How long a checkpoint may lack its witness quorum before that is an alarm.
const QUORUM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The height of the log's tiles (C2SP tlog-tiles).
const TILE_HEIGHT: u8 = 8;

#[derive(clap::Args, Debug)]
pub struct MonitorArgs {
    /// The instance's base URL, e.g. https://anchor.example.com
    pub url: String,
    /// The log's verifier key (`GET /v1/log/key`), or a file holding it.
    #[arg(long)]
    pub key: String,
    /// A witness's cosignature verifier key (or a file holding it) whose
    /// cosignature counts; repeatable.
    #[arg(long = "witness")]
    pub witnesses: Vec<String>,
    /// How many of the --witness keys must have cosigned (default: all).
    #[arg(long)]
    pub quorum: Option<usize>,
    /// Where the last checked checkpoint is kept between runs (created on
    /// the first run).
    #[arg(long)]
    pub state: PathBuf,
}

/// What the previous run saw.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    origin: String,
    size: u64,
    /// Base64 of the root hash.
    root: String,
    /// The signed checkpoint as served.
    checkpoint: String,
}

/// How a run ended.
#[derive(Debug)]
pub enum Verdict {
    /// Everything holds; what to print.
    Ok(Vec<String>),
    /// Something a log must never do, or a missing quorum.
    Alarm(String),
    /// The check could not be made.
    Unchecked(String),
}

/// A key given inline, or the path of a file holding it (the file wins
/// when both could be meant). A file over 64 KiB is no key file.
pub fn key_or_file(given: &str) -> Result<String, String> {
    match read_at_most(std::path::Path::new(given), 64 << 10) {
        Ok(bytes) => String::from_utf8(bytes).map(|text| text.trim().to_owned()).map_err(|_| format!("{given}: not UTF-8 text")),
        Err(ReadError::TooLarge(max)) => Err(format!("{given}: larger than a key file ({max} bytes at most)")),
        Err(ReadError::Io(_)) => Ok(given.to_owned()),
    }
}

/// Why a file could not be read whole.
#[derive(Debug)]
pub enum ReadError {
    /// It holds more than this many bytes.
    TooLarge(u64),
    Io(std::io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TooLarge(max) => write!(f, "larger than the {max} bytes such a file can hold"),
            ReadError::Io(error) => write!(f, "{error}"),
        }
    }
}

/// A file's bytes, if it holds at most `max`: a larger one is refused
/// having read no more than `max + 1` bytes of it.
pub fn read_at_most(path: &std::path::Path, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge(max));
    }
    Ok(bytes)
}

/// The most a monitor reads of one answer. Everything it asks for is small
/// (a checkpoint with its cosignatures, a proof of at most 64 hashes, a tile
/// of at most 256 hashes): an instance that answers more is not believed,
/// and cannot make the monitor hold it in memory.
const MAX_ANSWER: usize = 1 << 20;

async fn get(http: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = http.get(url).send().await.map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url}: {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("{url}: answered more than {MAX_ANSWER} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Serves tiles fetched beforehand; notes the ones asked for and missing.
struct Fetched {
    tiles: HashMap<Tile, Vec<u8>>,
    missing: RefCell<Vec<Tile>>,
}

impl TileReader for Fetched {
    fn height(&self) -> u8 {
        TILE_HEIGHT
    }

    fn read_tiles(&self, tiles: &[Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        let missing: Vec<Tile> = tiles.iter().filter(|t| !self.tiles.contains_key(t)).copied().collect();
        if !missing.is_empty() {
            *self.missing.borrow_mut() = missing;
            return Err(tlog_tiles::Error::BadMath);
        }
        Ok(tiles.iter().map(|t| self.tiles[t].clone()).collect())
    }

    fn save_tiles(&self, _tiles: &[Tile], _data: &[Vec<u8>]) {}
}

/// The C2SP path of a hash tile, below `tile/`.
fn tile_path(tile: &Tile) -> String {
    let path = tile.path();
    path.strip_prefix(&format!("tile/{TILE_HEIGHT}/")).unwrap_or(&path).to_owned()
}

/// Recomputes the root of a tree of `size` from the public hash tiles, and
/// compares it with `root` (the tile reader authenticates every tile it
/// reads against that root).
async fn check_tiles(http: &reqwest::Client, base: &str, size: u64, root: Hash) -> Result<(), Verdict> {
    let mut fetched = Fetched { tiles: HashMap::new(), missing: RefCell::new(Vec::new()) };
    for _ in 0..4 {
        let outcome = tree_hash(size, &TileHashReader::new(size, root, &fetched));
        let missing = std::mem::take(&mut *fetched.missing.borrow_mut());
        match outcome {
            Ok(computed) if computed == root => return Ok(()),
            Ok(_) => return Err(Verdict::Alarm("the log's hash tiles do not hash to the checkpoint's root".into())),
            Err(_) if !missing.is_empty() => {
                for tile in missing {
                    let data = get(http, &format!("{base}/v1/log/tile/{}", tile_path(&tile))).await.map_err(Verdict::Unchecked)?;
                    fetched.tiles.insert(tile, data);
                }
            }
            Err(e) => return Err(Verdict::Alarm(format!("the log's hash tiles do not hash to the checkpoint's root: {e}"))),
        }
    }
    Err(Verdict::Unchecked("the tiles needed kept changing".into()))
}

/// One monitoring run.
pub async fn run(args: &MonitorArgs) -> Verdict {
    match run_inner(args).await {
        Ok(lines) => Verdict::Ok(lines),
        Err(verdict) => verdict,
    }
}

async fn run_inner(args: &MonitorArgs) -> Result<Vec<String>, Verdict> {
    let base = args.url.trim_end_matches('/');
    let key = key_or_file(&args.key).map_err(|e| Verdict::Unchecked(format!("--key {e}")))?;
    let mut witnesses = Vec::new();
    for given in &args.witnesses {
        let text = key_or_file(given).map_err(|e| Verdict::Unchecked(format!("--witness {e}")))?;
        witnesses.push(WitnessKey::parse(&text).map_err(|e| Verdict::Unchecked(format!("--witness: {e}")))?);
    }
    let quorum = args.quorum.unwrap_or(witnesses.len());
    if quorum > witnesses.len() {
        return Err(Verdict::Unchecked(format!("--quorum {quorum} is more than the {} --witness keys given", witnesses.len())));
    }
    // The state is one checkpoint: it is never larger than an answer.
    let previous: Option<State> = match read_at_most(&args.state, MAX_ANSWER as u64 * 2) {
        Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| Verdict::Unchecked(format!("{}: {e}", args.state.display())))?),
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            // A first run: the state's folder must be there (or be made) to keep it.
            match args.state.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(folder) if !folder.is_dir() => std::fs::create_dir_all(folder).map_err(|e| {
                    Verdict::Unchecked(format!("{}: the folder for --state does not exist and could not be made: {e}", folder.display()))
                })?,
                _ => {}
            }
            None
        }
        Err(e) => return Err(Verdict::Unchecked(format!("{}: {e}", args.state.display()))),
    };
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| Verdict::Unchecked(e.to_string()))?;

    // The newest checkpoint may be seconds old and not cosigned yet: a
    // missing quorum is an alarm only once it has stayed missing for
    // QUORUM_PATIENCE.
    let patience = std::time::Instant::now() + QUORUM_PATIENCE;
    let (note, checkpoint, mut lines) = loop {
        let note = get(&http, &format!("{base}/v1/log/checkpoint")).await.map_err(Verdict::Unchecked)?;
        let note = String::from_utf8(note).map_err(|_| Verdict::Unchecked("the checkpoint is not UTF-8".into()))?;
        let checkpoint = open_checkpoint(&note, &key).map_err(|e| match e {
            Failure::Format(why) => Verdict::Unchecked(why),
            other => Verdict::Alarm(format!("the served checkpoint fails the {} check: {other}", other.check())),
        })?;
        let mut lines = vec![format!("ok: checkpoint of {} at size {} signed by the log's key", checkpoint.origin(), checkpoint.size())];
        if witnesses.is_empty() {
            break (note, checkpoint, lines);
        }
        // A cosignature line of a given key that does not verify is an alarm at once.
        let cosigned = cosignatures(&note, &witnesses, None)
            .map_err(|e| Verdict::Alarm(format!("the served checkpoint fails the witness check: {e}")))?;
        let names: Vec<&str> = cosigned.iter().map(|c| c.witness.as_str()).collect();
        if cosigned.len() >= quorum {
            lines.push(format!("ok: cosigned by {} ({} of {quorum} required)", names.join(", "), cosigned.len()));
            break (note, checkpoint, lines);
        }
        if std::time::Instant::now() >= patience {
            return Err(Verdict::Alarm(format!(
                "the newest checkpoint (size {}) has {} of the {quorum} witness cosignatures required ({}) after {} s",
                checkpoint.size(),
                cosigned.len(),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") },
                QUORUM_PATIENCE.as_secs()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    let (size, root) = (checkpoint.size(), *checkpoint.hash());

    if let Some(previous) = &previous {
        if previous.origin != checkpoint.origin() {
            return Err(Verdict::Unchecked(format!("the state file follows {}, this log is {}", previous.origin, checkpoint.origin())));
        }
        if size < previous.size {
            return Err(Verdict::Alarm(format!(
                "ROLLBACK: the log now serves size {size}, smaller than the size {} it served before",
                previous.size
            )));
        }
        if size == previous.size {
            if B64.encode(root.0) != previous.root {
                return Err(Verdict::Alarm(format!("FORK: two different roots for size {size}")));
            }
        } else if previous.size > 0 {
            let proof =
                get(&http, &format!("{base}/v1/log/consistency?from={}&to={size}", previous.size)).await.map_err(Verdict::Unchecked)?;
            let proof: ConsistencyProof =
                serde_json::from_slice(&proof).map_err(|e| Verdict::Unchecked(format!("the consistency proof: {e}")))?;
            anchor_verify::verify_consistency(&previous.checkpoint, &note, &proof, &key).map_err(|e| {
                Verdict::Alarm(format!(
                    "FORK: the checkpoint of size {size} does not extend the one of size {} seen before: {e}",
                    previous.size
                ))
            })?;
            lines.push(format!("ok: size {size} extends size {} seen before", previous.size));
        }
    }
    check_tiles(&http, base, size, root).await?;
    lines.push(format!("ok: the hash tiles hash to the root of size {size}"));

    let state = State { origin: checkpoint.origin().to_owned(), size, root: B64.encode(root.0), checkpoint: note };
    let temporary = args.state.with_extension("tmp");
    let json = serde_json::to_vec_pretty(&state).map_err(|e| Verdict::Unchecked(e.to_string()))?;
    std::fs::write(&temporary, json)
        .and_then(|()| std::fs::rename(&temporary, &args.state))
        .map_err(|e| Verdict::Unchecked(format!("{}: {e}", args.state.display())))?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server answering every connection with `body` (chunked).
    async fn answering(body: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut head = [0u8; 4096];
                    let _ = stream.read(&mut head).await;
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n").await;
                    for part in body.chunks(64 * 1024) {
                        let _ = stream.write_all(format!("{:x}\r\n", part.len()).as_bytes()).await;
                        let _ = stream.write_all(part).await;
                        let _ = stream.write_all(b"\r\n").await;
                    }
                    let _ = stream.write_all(b"0\r\n\r\n").await;
                });
            }
        });
        format!("http://{address}/v1/log/checkpoint")
    }

    #[tokio::test]
    async fn an_answer_past_the_cap_is_refused_and_one_within_it_read_whole() {
        let http = reqwest::Client::new();
        let huge = answering(vec![b'x'; super::MAX_ANSWER + 1]).await;
        let refused = super::get(&http, &huge).await.unwrap_err();
        assert!(refused.contains("answered more than 1048576 bytes"), "{refused}");
        let fits = answering(vec![b'y'; super::MAX_ANSWER]).await;
        assert_eq!(super::get(&http, &fits).await.unwrap().len(), super::MAX_ANSWER);
    }
}
