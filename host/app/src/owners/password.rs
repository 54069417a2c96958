//! Owner passwords, hashed with argon2id (the `argon2` crate's defaults:
//! 19 MiB, 2 passes, 1 lane) and stored as PHC strings. Hashing takes about
//! 15 ms of one core, so it runs on the blocking pool, never on the async
//! workers serving other requests.

use std::sync::OnceLock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::RngCore;

/// The argon2id PHC string of `password`.
pub fn hash(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
    Ok(Argon2::default().hash_password(password.as_bytes(), &salt).map_err(|e| anyhow::anyhow!("argon2: {e}"))?.to_string())
}

/// True if `password` matches the stored hash. With no stored hash, a fixed
/// hash is checked instead, so an unknown email costs the same time.
pub fn verify(stored: Option<&str>, password: &str) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash("not-a-password-0").unwrap_or_default());
    let (phc, real) = match stored {
        Some(hash) => (hash, true),
        None => (dummy.as_str(), false),
    };
    let Ok(parsed) = PasswordHash::new(phc) else { return false };
    Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok() && real
}

/// [`hash`] on the blocking pool.
pub async fn hash_off_thread(password: &str) -> anyhow::Result<String> {
    let password = password.to_string();
    tokio::task::spawn_blocking(move || hash(&password)).await?
}

/// [`verify`] on the blocking pool.
pub async fn verify_off_thread(stored: Option<&str>, password: &str) -> bool {
    let (stored, password) = (stored.map(str::to_string), password.to_string());
    tokio::task::spawn_blocking(move || verify(stored.as_deref(), &password)).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_argon2id_and_verify() {
        let stored = hash("correct horse 9").unwrap();
        assert!(stored.starts_with("$argon2id$"));
        assert!(verify(Some(&stored), "correct horse 9"));
        assert!(!verify(Some(&stored), "correct horse 8"));
        assert!(!verify(None, "not-a-password-0"));
    }
}
