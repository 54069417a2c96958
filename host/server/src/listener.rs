//! Accepting connections: HTTP/1.1 over hyper, with the limits a public
//! service needs against slow and greedy clients.
//!
//! - at most `max_connections` at once: past that the listener stops accepting
//!   (the kernel's backlog holds the rest) until one closes;
//! - at most `max_connections_per_client` at once from one client (an IPv4
//!   address, or an IPv6 /64, which one subscriber usually holds whole):
//!   past that a new connection from it is answered 429 JSON
//!   `TOO_MANY_CONNECTIONS` and closed, so one client cannot hold the
//!   listener ([`client_key`]);
//! - a request head must arrive within `header_read_timeout`, counted from the
//!   moment the connection waits for it: on a new connection and between
//!   requests of a kept-alive one, so idle and half-sent connections close;
//! - a request body must arrive within `body_read_timeout` of its head
//!   ([`body_deadline`], 408 JSON);
//! - bodies over `max_body_bytes` are refused (413 JSON): from their declared
//!   `Content-Length` before a byte of them is read ([`body_deadline`]), and in
//!   the extractors for bodies sent in chunks; URLs over [`MAX_URL_BYTES`]
//!   answer 414 and header sections over [`MAX_HEADER_BYTES`] 431, as JSON
//!   ([`protocol_limits`]).
//!
//! A request's handler runs to its end even when its client hangs up
//! ([`RunToEnd`]): what it writes never stops half-way for that.
//!
//! Beyond those, the HTTP parser's own limits (a request line over 64 KiB, a
//! head over `max_buf_size` or with more than [`MAX_HEADERS`] fields, bytes
//! that are not HTTP) answer before any handler runs; [`JsonErrors`] gives
//! those answers the same JSON body as every other refusal.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::proxies::TrustedProxies;

/// The longest request target (path and query) a handler sees.
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// The largest header section (names and values) a handler sees.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The HTTP parser's buffer: heads larger than this never reach the router.
const PARSER_BUFFER_BYTES: usize = 128 * 1024;
/// Header fields the HTTP parser reads at most (431 JSON beyond).
pub const MAX_HEADERS: usize = 100;
/// Connections answered `TOO_MANY_CONNECTIONS` at once; past that a client
/// over its limit is simply closed.
const REFUSALS_AT_ONCE: usize = 256;
/// How long a refused connection has to send its request's head.
const REFUSAL_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Limits on connections and requests; see the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub max_connections: usize,
    /// Connections one client ([`client_key`]) may hold at once.
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_body_bytes: usize,
    /// At shutdown, how long requests in flight get to finish.
    pub shutdown_grace: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_connections: 4096,
            max_connections_per_client: 256,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_body_bytes: 1024 * 1024,
            shutdown_grace: Duration::from_secs(20),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops in
/// three steps, within `limits.shutdown_grace` in all:
///
/// 1. connections the kernel already took (the accept queue) are accepted
///    and served, then the listening socket closes: later connections are
///    refused, which a client can retry elsewhere safely;
/// 2. for up to [`LINGER`] open connections go on serving what their clients
///    already sent, each response saying `Connection: close`;
/// 3. then each connection finishes the request under way and closes; idle
///    ones close at once.
///
/// Every connection carries its peer address (`ConnectInfo<SocketAddr>`),
/// which the rate limit reads.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_behind(listener, router, limits, TrustedProxies::default(), shutdown).await
}

/// [`serve`], with the balancers in `proxies` outside the per-client
/// connection limit: each carries many clients' connections (the shipped
/// HAProxy opens up to 512 to a host), which the per-request limits then
/// tell apart by `X-Forwarded-For` ([`crate::proxies`]). They still
/// count towards `max_connections`.
pub async fn serve_behind(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    proxies: TrustedProxies,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Clients::new(limits.max_connections_per_client.max(1), proxies);
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let draining = Arc::new(AtomicBool::new(false));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(PARSER_BUFFER_BYTES)
        .max_headers(MAX_HEADERS)
        // A client may close its sending side once its request is out
        // (`shutdown(SHUT_WR)`) and still wait for the answer.
        .half_close(true)
        .keep_alive(true);
    let mut refusing = hyper::server::conn::http1::Builder::new();
    refusing.timer(TokioTimer::new()).header_read_timeout(REFUSAL_HEADER_TIMEOUT).max_buf_size(PARSER_BUFFER_BYTES).keep_alive(false);
    let refuse = |stream: tokio::net::TcpStream, peer: SocketAddr| {
        let Ok(permit) = refusals.clone().try_acquire_owned() else {
            // Refusals are bounded too: past them the connection just closes.
            return;
        };
        let service = hyper::service::service_fn(move |_request: hyper::Request<hyper::body::Incoming>| async move {
            let mut response = ApiError::Protocol {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: "TOO_MANY_CONNECTIONS",
                message: format!(
                    "this client ({}) already holds the most connections this service keeps open for one client; \
                     reuse them (keep-alive) or close some",
                    client_key(peer.ip())
                ),
                allow: None,
            }
            .into_response();
            let headers = response.headers_mut();
            headers.insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            headers.insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
            Ok::<_, std::convert::Infallible>(response)
        });
        let connection = graceful.watch(refusing.serve_connection(TokioIo::new(JsonErrors::new(stream)), service));
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    };
    let connection = |stream: tokio::net::TcpStream, peer: SocketAddr, slot: Option<tokio::sync::OwnedSemaphorePermit>| {
        let Some(client) = clients.enter(peer.ip()) else {
            refuse(stream, peer);
            return;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let draining = draining.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            let draining = draining.clone();
            async move {
                // hyper drops the future of a request whose client hung up; a
                // write stopped half-way (a payment settled, its record not yet
                // written) must not depend on a client waiting for it.
                let mut response = RunToEnd::new(async move { tower::Service::call(&mut router, request.map(Body::new)).await }).await?;
                // A refusal that leaves the request's body unread (413) ends
                // the connection: the unread bytes cannot be told from the
                // next request, so a client must not reuse it.
                if draining.load(Ordering::Relaxed) || response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(JsonErrors::new(stream)), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "connection closed with an error");
            }
            drop(client);
            drop(slot);
        });
    };
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: wait a little, never spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        connection(stream, peer, Some(slot));
    }
    let stopping = tokio::time::Instant::now();
    draining.store(true, Ordering::Relaxed);
    // The accept queue: these clients connected before the close, and may
    // have sent their request already; they are served, not reset.
    // Asked of the socket itself, not of the reactor's cached readiness.
    let mut queued = 0;
    if let Ok(listener) = listener.into_std() {
        let _ = listener.set_nonblocking(true);
        while let Ok((stream, peer)) = listener.accept() {
            let Ok(stream) = stream.set_nonblocking(true).and_then(|()| tokio::net::TcpStream::from_std(stream)) else { continue };
            connection(stream, peer, None);
            queued += 1;
        }
    }
    tracing::info!(
        connections = graceful.count(),
        from_queue = queued,
        grace_secs = limits.shutdown_grace.as_secs_f64(),
        "stopped accepting; finishing requests in flight"
    );
    let linger = LINGER.min(limits.shutdown_grace);
    while graceful.count() > 0 && stopping.elapsed() < linger {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = limits.shutdown_grace.saturating_sub(stopping.elapsed());
    if tokio::time::timeout(left, graceful.shutdown()).await.is_err() {
        tracing::warn!("requests were still in flight when the shutdown grace ran out; their connections are dropped");
    }
    Ok(())
}

/// The key one client's connections and requests are counted under: an
/// IPv4 address (an IPv4-mapped IPv6 address is its IPv4 one), or the /64
/// an IPv6 address is in (a subscriber is usually given a whole /64, so
/// counting its addresses one by one would count it many times).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Open connections per client.
#[derive(Clone)]
struct Clients {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// Balancers, not counted per client.
    proxies: Arc<TrustedProxies>,
}

/// One open connection of a client's, counted until it is dropped (a
/// trusted proxy's is not counted: `key` is `None`).
struct ClientConnection {
    clients: Clients,
    key: Option<IpAddr>,
}

impl Clients {
    fn new(max: usize, proxies: TrustedProxies) -> Clients {
        Clients { max, open: Arc::default(), proxies: Arc::new(proxies) }
    }

    /// Counts a new connection of `ip`'s client, unless it holds its most already.
    fn enter(&self, ip: IpAddr) -> Option<ClientConnection> {
        if self.proxies.contains(ip) {
            return Some(ClientConnection { clients: self.clone(), key: None });
        }
        let key = client_key(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ClientConnection { clients: self.clone(), key: Some(key) })
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        let Some(key) = self.key else { return };
        let mut open = self.clients.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

/// A connection whose writes pass through unchanged, except the answers the
/// HTTP parser itself writes when a request is not one it can read (400 for
/// bytes that are not HTTP, 414 for a request line over its limit, 431 for
/// a head too large or with too many fields): those get the JSON body every
/// refusal of this service has, with `Connection: close`.
///
/// The parser's answers are recognised by their shape: a complete head of
/// one of those statuses with `content-length: 0` and no `content-type`,
/// which no response of the application has (every refusal carries a JSON
/// body). They are written when no request is under way on the connection.
pub struct JsonErrors<T> {
    inner: T,
    /// A rewritten answer not yet written whole.
    pending: Vec<u8>,
    written: usize,
}

impl<T> JsonErrors<T> {
    pub fn new(inner: T) -> JsonErrors<T> {
        JsonErrors { inner, pending: Vec::new(), written: 0 }
    }
}

/// The JSON answer for the parser's own `head`, if `head` is one.
fn parser_answer(head: &[u8]) -> Option<Vec<u8>> {
    if head.len() > 1024 || !head.starts_with(b"HTTP/1.1 ") || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let lower = text.to_ascii_lowercase();
    if !lower.contains("\r\ncontent-length: 0\r\n") || lower.contains("\r\ncontent-type:") {
        return None;
    }
    let (status, code, message) = match &text[9..12] {
        "400" => {
            (StatusCode::BAD_REQUEST, "BAD_REQUEST", "the request is not one HTTP/1.1 can read (its request line or a header)".to_string())
        }
        "414" => (
            StatusCode::URI_TOO_LONG,
            "URI_TOO_LONG",
            format!("the request URL is too long; this service reads at most {MAX_URL_BYTES} bytes"),
        ),
        "431" => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "HEADERS_TOO_LARGE",
            format!(
                "the request head is too large or has more than {MAX_HEADERS} header fields; this service reads at most {MAX_HEADER_BYTES} bytes of headers"
            ),
        ),
        _ => return None,
    };
    let body = serde_json::json!({ "error_code": code, "message": message }).to_string();
    let date = text.lines().find(|l| l.to_ascii_lowercase().starts_with("date:")).map(|l| format!("{l}\r\n")).unwrap_or_default();
    Some(
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{date}\r\n{body}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> JsonErrors<T> {
    /// Writes what is left of a rewritten answer; ready once it is all written.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.written < self.pending.len() {
            let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrors<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrors<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if let Some(answer) = parser_answer(buf) {
            self.pending = answer;
            self.written = 0;
            // Taken whole; written by this call and the flush that follows.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty())
            && parser_answer(first).is_some()
        {
            return self.poll_write(cx, first);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Raises this process's limit of open files to what `limits` need (each
/// connection is one, plus the database's and the files the host keeps
/// open), within the hard limit; says so when the hard limit is lower.
pub fn raise_open_files(limits: &HttpLimits) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let wanted = limits.max_connections as u64 + REFUSALS_AT_ONCE as u64 + 512;
    let current = getrlimit(Resource::Nofile);
    let soft = current.current.unwrap_or(u64::MAX);
    if soft >= wanted {
        return;
    }
    let hard = current.maximum.unwrap_or(u64::MAX);
    let raised = wanted.min(hard);
    if raised > soft && setrlimit(Resource::Nofile, Rlimit { current: Some(raised), maximum: current.maximum }).is_ok() {
        tracing::info!(from = soft, to = raised, "raised the open files limit for the connection limit");
    }
    if raised < wanted {
        tracing::warn!(
            open_files = raised,
            max_connections = limits.max_connections,
            "the open files limit is below what --max-connections needs; connections past it are refused by the kernel"
        );
    }
}

/// How long, at shutdown, open connections keep serving requests their
/// clients already sent before idle ones are closed.
pub const LINGER: Duration = Duration::from_secs(1);

/// Refuses, as JSON, requests whose URL or header section is over the limits
/// (414, 431), before any handler reads them.
pub async fn protocol_limits(request: Request, next: Next) -> Response {
    let url = request.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if url > MAX_URL_BYTES {
        return ApiError::Protocol {
            status: StatusCode::URI_TOO_LONG,
            code: "URI_TOO_LONG",
            message: format!("the request URL has {url} bytes; this service reads at most {MAX_URL_BYTES}"),
            allow: None,
        }
        .into_response();
    }
    let headers: usize = request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    if headers > MAX_HEADER_BYTES {
        return ApiError::Protocol {
            status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            code: "HEADERS_TOO_LARGE",
            message: format!("the request headers have {headers} bytes; this service reads at most {MAX_HEADER_BYTES}"),
            allow: None,
        }
        .into_response();
    }
    next.run(request).await
}

/// `router` behind the request-level limits every server of this binary
/// keeps: each body's deadline and declared size ([`body_deadline`], with
/// the larger limits of `routes`), the URL and header bounds
/// ([`protocol_limits`]), and a panic answered as a 500 ([`catch_panic`]).
pub fn guarded<S: Clone + Send + Sync + 'static>(router: Router<S>, limits: HttpLimits, routes: &'static [BodyLimit]) -> Router<S> {
    let (timeout, max) = (limits.body_read_timeout, limits.max_body_bytes);
    router
        .layer(axum::middleware::from_fn(move |request, next| body_deadline(timeout, max, routes, request, next)))
        .layer(axum::middleware::from_fn(protocol_limits))
        .layer(axum::middleware::from_fn(catch_panic))
}

/// The error a request body gives when it did not arrive in time.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

/// A route that accepts bodies over the server's own limit: its method, its
/// path as a pattern (`*` stands for one segment) and its limit. The routes
/// declare them; the listener reads them as data and names no route.
#[derive(Clone, Debug)]
pub struct BodyLimit {
    pub method: Method,
    pub path: &'static str,
    pub max: usize,
}

/// The limit of the first of `routes` that `method` and `path` match.
pub fn body_limit(routes: &[BodyLimit], method: &Method, path: &str) -> Option<usize> {
    let matches = |pattern: &str| {
        let (mut want, mut have) = (pattern.split('/'), path.split('/'));
        loop {
            match (want.next(), have.next()) {
                (None, None) => return true,
                (Some("*"), Some(segment)) if !segment.is_empty() => {}
                (Some(w), Some(h)) if w == h => {}
                _ => return false,
            }
        }
    };
    routes.iter().find(|route| route.method == method && matches(route.path)).map(|route| route.max)
}

/// Refuses a body whose declared `Content-Length` is over `max` (the route's
/// own limit where `routes` gives one, [`body_limit`]) with 413 before a
/// byte of it is read; gives every other body a deadline: `limit` from the
/// arrival of its head. A body still incomplete then fails with
/// [`BodyTimeout`], which the body extractors answer with 408.
pub async fn body_deadline(limit: Duration, max: usize, routes: &'static [BodyLimit], request: Request, next: Next) -> Response {
    let declared =
        request.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(declared) = declared {
        let max = body_limit(routes, request.method(), request.uri().path()).unwrap_or(max);
        if declared > max as u64 {
            // Answered at once; what the client is still sending is read and
            // thrown away (up to a bound, within the deadline) so that closing
            // the connection does not reset it before the client reads the 413.
            let (_, body) = request.into_parts();
            tokio::spawn(discard(body, limit));
            return ApiError::Protocol {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "PAYLOAD_TOO_LARGE",
                message: format!("the request body declares {declared} bytes; this route accepts at most {max}"),
                allow: None,
            }
            .into_response();
        }
    }
    let (parts, body) = request.into_parts();
    let body = Body::new(Deadline { inner: body, sleep: Box::pin(tokio::time::sleep(limit)) });
    next.run(Request::from_parts(parts, body)).await
}

/// The most of a refused body read and thrown away before its connection closes.
const DISCARD_MAX_BYTES: usize = 64 << 20;

/// Reads `body` to its end, up to [`DISCARD_MAX_BYTES`] and `limit`, and drops it.
pub async fn discard(body: Body, limit: Duration) {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut read = 0usize;
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |d| d.len());
            if read > DISCARD_MAX_BYTES {
                break;
            }
        }
    })
    .await;
}

struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Deadline {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error` (or one of its sources) is a [`BodyTimeout`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<BodyTimeout>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// A request's future that, dropped before it finished (its connection
/// closed), goes on to its end in a task of its own: what its handler
/// writes never stops half-way because a client hung up. A request that
/// finishes costs no task.
struct RunToEnd<F: Future<Output: Send> + Send + 'static> {
    inner: Option<Pin<Box<F>>>,
}

impl<F: Future<Output: Send> + Send + 'static> RunToEnd<F> {
    fn new(future: F) -> Self {
        RunToEnd { inner: Some(Box::pin(future)) }
    }
}

impl<F: Future<Output: Send> + Send + 'static> Future for RunToEnd<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Pending };
        let done = inner.as_mut().poll(cx);
        if done.is_ready() {
            self.inner = None;
        }
        done
    }
}

impl<F: Future<Output: Send> + Send + 'static> Drop for RunToEnd<F> {
    fn drop(&mut self) {
        // (A runtime shutting down, where none is current, ends it here.)
        if let Some(unfinished) = self.inner.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(unfinished);
        }
    }
}

/// Answers a panic in a handler with 500 JSON and logs it: the connection and
/// the server stay up, and nothing is committed that the handler had not
/// committed before it panicked.
pub async fn catch_panic(request: Request, next: Next) -> Response {
    use futures_util::FutureExt;
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    match std::panic::AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            tracing::error!(%method, path = %anchor_domain::brief(&path), panic = %what, "a handler panicked");
            ApiError::internal(anyhow::anyhow!("handler panicked: {what}")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    #[test]
    fn a_route_pattern_matches_one_segment_per_star() {
        let routes = [BodyLimit { method: Method::PUT, path: "/v1/tsl/tool/*/component", max: 7 }];
        assert_eq!(body_limit(&routes, &Method::PUT, "/v1/tsl/tool/abc/component"), Some(7));
        for (method, path) in [
            (Method::POST, "/v1/tsl/tool/abc/component"),
            (Method::PUT, "/v1/tsl/tool//component"),
            (Method::PUT, "/v1/tsl/tool/a/b/component"),
            (Method::PUT, "/v1/tsl/tool/abc/component/x"),
            (Method::PUT, "/v1/tsl/tool/abc"),
        ] {
            assert_eq!(body_limit(&routes, &method, path), None, "{method} {path}");
        }
    }

    async fn boom() -> &'static str {
        panic!("deliberate")
    }

    /// A handler that panics answers 500 JSON on a connection that stays
    /// usable, and the server goes on serving.
    #[tokio::test]
    async fn a_panicking_handler_answers_500_json_and_the_server_stays_up() {
        let router =
            Router::new().route("/boom", get(boom)).route("/fine", get(|| async { "fine" })).layer(axum::middleware::from_fn(catch_panic));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(serve(listener, router, HttpLimits::default(), std::future::pending()));
        let client = reqwest::Client::new();
        for _ in 0..3 {
            let boom = client.get(format!("{base}/boom")).send().await.expect("the connection is answered, not dropped");
            assert_eq!(boom.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body: serde_json::Value = boom.json().await.unwrap();
            assert_eq!(body["error_code"], "INTERNAL_ERROR");
            let fine = client.get(format!("{base}/fine")).send().await.unwrap();
            assert_eq!(fine.text().await.unwrap(), "fine");
        }
        server.abort();
    }

    #[tokio::test]
    async fn connections_past_the_limit_wait_for_a_free_one() {
        let router = Router::new().route("/fine", get(|| async { "fine" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = HttpLimits { max_connections: 2, header_read_timeout: Duration::from_millis(500), ..HttpLimits::default() };
        let server = tokio::spawn(serve(listener, router, limits, std::future::pending()));
        // Two idle connections take both places.
        let idle = [tokio::net::TcpStream::connect(addr).await.unwrap(), tokio::net::TcpStream::connect(addr).await.unwrap()];
        let started = std::time::Instant::now();
        let reply = reqwest::get(format!("http://{addr}/fine")).await.unwrap();
        assert_eq!(reply.text().await.unwrap(), "fine");
        // It was answered once the header timeout closed an idle one.
        assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
        drop(idle);
        server.abort();
    }
}
