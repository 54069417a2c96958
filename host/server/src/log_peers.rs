//! The HTTP clients a log host reaches the others with: its witnesses
//! (C2SP `tlog-witness`, for `anchor_app::witness`) and its RFC 3161
//! time-stamping authority (for `anchor_app::timestamp`). Answers are read
//! up to a bound, and every failure is a message, never a panic.

use axum::http::header;

use crate::witness_server::MAX_BODY;

/// Reads an answer's body, refusing one over `limit` bytes without reading the rest.
pub(crate) async fn read_bounded(response: &mut reqwest::Response, limit: usize, url: &str) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > limit {
            return Err(format!("{url}: the answer is larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// How a log host reaches its witnesses: HTTP with keep-alive, a bounded
/// time per call and a bounded answer.
pub struct HttpTransport(reqwest::Client);

impl HttpTransport {
    pub fn new() -> anyhow::Result<HttpTransport> {
        Ok(HttpTransport(
            reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(2))
                .timeout(std::time::Duration::from_secs(5))
                .pool_idle_timeout(std::time::Duration::from_secs(90))
                // A witness is reached at the URL the operator named, never
                // where an answer points (a redirect there is answered as
                // any other unexpected status).
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        ))
    }
}

#[async_trait::async_trait]
impl anchor_app::witness::Transport for HttpTransport {
    async fn add_checkpoint(&self, url: &str, body: String) -> Result<anchor_app::witness::Answer, String> {
        let mut response = self
            .0
            .post(format!("{url}/add-checkpoint"))
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status().as_u16();
        let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        // A witness's answer is a few signature lines; more is not read.
        let body = read_bounded(&mut response, MAX_BODY, url).await?;
        Ok(anchor_app::witness::Answer { status, content_type, body: String::from_utf8_lossy(&body).into_owned() })
    }
}

/// How a log host reaches its time-stamping authorities: RFC 3161 over
/// HTTP (`application/timestamp-query` in, `application/timestamp-reply`
/// out), bounded in time and size.
pub struct HttpTsa(reqwest::Client);

/// The largest TSA reply read (a token with its certificate chain).
const MAX_TSA_REPLY: usize = 256 * 1024;

impl HttpTsa {
    pub fn new() -> anyhow::Result<HttpTsa> {
        Ok(HttpTsa(
            reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(3))
                .timeout(std::time::Duration::from_secs(10))
                // Only the URL the operator named is asked, never a redirect's.
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        ))
    }
}

#[async_trait::async_trait]
impl anchor_app::timestamp::TsaTransport for HttpTsa {
    async fn stamp(&self, url: &str, request: Vec<u8>) -> Result<Vec<u8>, String> {
        let mut response = self
            .0
            .post(url)
            .header(header::CONTENT_TYPE, "application/timestamp-query")
            .header(header::ACCEPT, "application/timestamp-reply")
            .body(request)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("the TSA answered {}", response.status()));
        }
        read_bounded(&mut response, MAX_TSA_REPLY, url).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use anchor_app::timestamp::TsaTransport;
    use anchor_app::witness::Transport;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server that counts its connections and answers each with `head`.
    async fn answering(head: String) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let head = head.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8192];
                    let _ = stream.read(&mut request).await;
                    let _ = stream.write_all(head.as_bytes()).await;
                });
            }
        });
        (format!("http://{address}"), count)
    }

    /// A witness or TSA that answers with a redirect is not followed there:
    /// the redirect is the answer (a log host must reach no other address
    /// than the operator named).
    #[tokio::test]
    async fn witnesses_and_time_stamping_authorities_are_never_followed_elsewhere() {
        let (elsewhere, reached) = answering("HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".into()).await;
        let redirect = format!("HTTP/1.1 302 Found\r\nlocation: {elsewhere}/internal\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        let (witness, asked) = answering(redirect.clone()).await;
        let answer = super::HttpTransport::new().unwrap().add_checkpoint(&witness, "old 0\n\n".into()).await.unwrap();
        assert_eq!(answer.status, 302);
        let (tsa, _) = answering(redirect).await;
        let refused = super::HttpTsa::new().unwrap().stamp(&tsa, vec![0x30, 0x00]).await.unwrap_err();
        assert!(refused.contains("302"), "{refused}");
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert_eq!(reached.load(Ordering::SeqCst), 0, "the redirect's target was never asked");
    }
}
