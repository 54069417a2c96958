//! Accepting connections: HTTP/1.1 over hyper, with the limits a public
//! service needs against slow and greedy clients.
//!
//! - at most `max_connections` at once: past that the listener stops accepting
//!   (the kernel's backlog holds the rest) until one closes;
//! - a request head must arrive within `header_read_timeout`, counted from the
//!   moment the connection waits for it: on a new connection and between
//!   requests of a kept-alive one, so idle and half-sent connections close;
//! - a request body must arrive within `body_read_timeout` of its head
//!   ([`body_deadline`], 408 JSON);
//! - bodies over `max_body_bytes` are refused (413 JSON, in the extractors);
//!   URLs over [`MAX_URL_BYTES`] answer 414 and header sections over
//!   [`MAX_HEADER_BYTES`] 431, as JSON ([`protocol_limits`]).
//!
//! Beyond those, the HTTP parser's own hard limits (a request line over 64 KiB,
//! a head over `max_buf_size`) close the connection with a bare status line:
//! no handler runs for bytes that are not an HTTP request.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// The longest request target (path and query) a handler sees.
pub const MAX_URL_BYTES: usize = 8 * 1024;
/// The largest header section (names and values) a handler sees.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The HTTP parser's buffer: heads larger than this never reach the router.
const PARSER_BUFFER_BYTES: usize = 128 * 1024;

/// Limits on connections and requests; see the module documentation.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_body_bytes: usize,
    /// At shutdown, how long requests in flight get to finish.
    pub shutdown_grace: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_connections: 1024,
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
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let draining = Arc::new(AtomicBool::new(false));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).max_buf_size(PARSER_BUFFER_BYTES).keep_alive(true);
    let connection = |stream: tokio::net::TcpStream, peer: SocketAddr, slot: Option<tokio::sync::OwnedSemaphorePermit>| {
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let draining = draining.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            let draining = draining.clone();
            async move {
                let mut response = tower::Service::call(&mut router, request.map(Body::new)).await?;
                // A refusal that leaves the request's body unread (413) ends
                // the connection: the unread bytes cannot be told from the
                // next request, so a client must not reuse it.
                if draining.load(Ordering::Relaxed) || response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, %peer, "connection closed with an error");
            }
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

/// The error a request body gives when it did not arrive in time.
#[derive(Debug)]
pub struct BodyTimeout;

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTimeout {}

/// Gives the request body a deadline: `limit` from the arrival of its head.
/// A body still incomplete then fails with [`BodyTimeout`], which the body
/// extractors answer with 408.
pub async fn body_deadline(limit: Duration, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(Deadline { inner: body, sleep: Box::pin(tokio::time::sleep(limit)) });
    next.run(Request::from_parts(parts, body)).await
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
