//! Owner passwords, hashed with argon2id (the `argon2` crate's defaults:
//! 19 MiB, 2 passes, 1 lane) and stored as PHC strings. Hashing takes about
//! 15 ms of one core, so it runs on the blocking pool, never on the async
//! workers serving other requests, and at most [`at_once`] at a time: more
//! than the cores can run would only add 19 MiB each (the blocking pool
//! alone would let hundreds run), so the rest wait their turn, holding
//! nothing but their request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

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

/// How many hashes (and verifications) run at once in this process: one per core, two at least.
pub fn at_once() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).max(2)
}

fn turns() -> Arc<Semaphore> {
    static TURNS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    TURNS.get_or_init(|| Arc::new(Semaphore::new(at_once()))).clone()
}

/// Hashes running now, and the most that ever ran at once.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static MOST: AtomicUsize = AtomicUsize::new(0);

/// The most hashes (and verifications) that ran at once in this process so far.
pub fn most_at_once() -> usize {
    MOST.load(Ordering::Relaxed)
}

/// Runs `work` on the blocking pool once a turn is free; the turn goes with
/// the work, so a request dropped meanwhile does not free it early.
async fn in_turn<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    let turn = turns().acquire_owned().await?;
    Ok(tokio::task::spawn_blocking(move || {
        let now = RUNNING.fetch_add(1, Ordering::Relaxed) + 1;
        MOST.fetch_max(now, Ordering::Relaxed);
        let out = work();
        RUNNING.fetch_sub(1, Ordering::Relaxed);
        drop(turn);
        out
    })
    .await?)
}

/// [`hash`] on the blocking pool, in turn.
pub async fn hash_off_thread(password: &str) -> anyhow::Result<String> {
    let password = password.to_string();
    in_turn(move || hash(&password)).await?
}

/// [`verify`] on the blocking pool, in turn.
pub async fn verify_off_thread(stored: Option<&str>, password: &str) -> bool {
    let (stored, password) = (stored.map(str::to_string), password.to_string());
    in_turn(move || verify(stored.as_deref(), &password)).await.unwrap_or(false)
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

    /// Many sign-ins at once: no more hashes run together than the process
    /// has turns, and every one of them is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hashes_take_turns() {
        let stored = hash("correct horse 9").unwrap();
        let checks = (0..6 * at_once()).map(|i| {
            let stored = stored.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    hash_off_thread("another one 1").await.is_ok()
                } else {
                    verify_off_thread(Some(&stored), "correct horse 9").await
                }
            })
        });
        let answers = futures_util::future::join_all(checks).await;
        assert!(answers.into_iter().all(|a| a.unwrap()), "every hash and verification answered, and right");
        let most = most_at_once();
        assert!((1..=at_once()).contains(&most), "{most} hashes ran at once; the process has {} turns", at_once());
    }
}
