//! Owner sessions. A session is 32 random bytes; the client holds them
//! (base64url) and the database keeps only their SHA-256, with an absolute
//! expiry, so any host sharing the database serves any session and a sign-out
//! ends it everywhere. The CSRF token of a session is derived from its secret,
//! so it is never stored.

use base64::Engine;
use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};

use anchor_domain::owners::AccountStatus;
use anchor_domain::records::OwnerRecord;

use crate::{AppError, AppResult, Services};

/// A session just opened: its secret (shown once, to set the cookie).
#[derive(Clone, Debug)]
pub struct Session {
    pub secret: String,
    pub csrf_token: String,
    pub expires_at: DateTime<Utc>,
}

fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn session_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The CSRF token of a session: derived from its secret, never stored.
pub fn csrf_token(secret: &str) -> String {
    hex::encode(Sha256::new().chain_update(b"anchor-csrf/1\n").chain_update(secret.as_bytes()).finalize())
}

/// Opens a session for `owner`.
pub async fn open(services: &Services, owner: &OwnerRecord) -> AppResult<Session> {
    let secret = new_secret();
    let now = services.clock.now();
    let expires_at = now + services.config.owners.session_ttl;
    let opened =
        services.store.insert_session(&session_hash(&secret), owner.owner_id, owner.password_hash.as_deref(), now, expires_at).await?;
    if !opened {
        // The password changed (or the account went) since it was checked.
        return Err(AppError::Unauthenticated { message: "email or password is wrong".into() });
    }
    Ok(Session { csrf_token: csrf_token(&secret), secret, expires_at })
}

/// The owner of a live session; an account past its deletion grace period is
/// gone, even before the eraser runs.
pub async fn owner_of(services: &Services, secret: &str) -> AppResult<Option<OwnerRecord>> {
    let now = services.clock.now();
    let owner = services.store.session_owner(&session_hash(secret), now).await?;
    Ok(owner.filter(|o| super::account_status(o, now) != AccountStatus::Deleted))
}

/// Ends a session, wherever it is served.
pub async fn close(services: &Services, secret: &str) -> AppResult<()> {
    Ok(services.store.delete_session(&session_hash(secret)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_not_the_stored_hash() {
        assert_ne!(csrf_token("a"), csrf_token("b"));
        assert_ne!(csrf_token("a"), hex::encode(session_hash("a")));
    }
}
