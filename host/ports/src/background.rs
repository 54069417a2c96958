//! Whether the running task is a round of the background jobs, whose writes
//! the store may put on a connection of their own instead of the request
//! path's group commit.

tokio::task_local! {
    static BACKGROUND: bool;
}

/// Whether this task is a round of the background jobs.
pub fn is_background() -> bool {
    BACKGROUND.try_with(|b| *b).unwrap_or(false)
}

/// Runs `work` (a round of the background jobs) marked as one, so the store
/// writes it on the jobs' own writer connection where it has one.
pub async fn in_background<F: std::future::Future>(work: F) -> F::Output {
    BACKGROUND.scope(true, work).await
}
