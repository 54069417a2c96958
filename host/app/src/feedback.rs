//! Anonymous feedback from agents (the MCP tool `submit_feedback`): kept
//! with nothing that names who sent it (no agent id, token, address or time
//! of day: only the UTC day), each text bounded, and only the newest
//! [`KEEP`] notes. The operator reads them with `anchor feedback list`.

use anchor_domain::records::Feedback;

use crate::{AppError, AppResult, Services};

/// The notes kept; older ones are dropped as new ones arrive.
pub const KEEP: i64 = 10_000;
/// The longest text field, in characters.
pub const TEXT_MAX_CHARS: usize = 4000;
/// The most tool names in `tools_used`, and the longest one.
pub const TOOLS_MAX: usize = 50;
pub const TOOL_NAME_MAX_CHARS: usize = 200;

fn check(name: &str, text: &str, max: usize) -> AppResult<()> {
    if text.chars().count() > max {
        return Err(AppError::invalid("INVALID_VALUE", format!("{name} holds at most {max} characters")));
    }
    if text.contains('\0') {
        return Err(AppError::invalid("INVALID_VALUE", format!("{name} contains a NUL character")));
    }
    Ok(())
}

/// Keeps a note. Every field is optional.
pub async fn submit(services: &Services, feedback: &Feedback) -> AppResult<()> {
    let texts = [
        ("note", &feedback.note),
        ("would_recommend", &feedback.would_recommend),
        ("recommend_reason", &feedback.recommend_reason),
        ("would_report_to_operator", &feedback.would_report_to_operator),
        ("report_reason", &feedback.report_reason),
        ("would_keep_as_tool", &feedback.would_keep_as_tool),
        ("keep_reason", &feedback.keep_reason),
    ];
    for (name, text) in texts {
        if let Some(text) = text {
            check(name, text, TEXT_MAX_CHARS)?;
        }
    }
    if feedback.tools_used.len() > TOOLS_MAX {
        return Err(AppError::invalid("INVALID_VALUE", format!("tools_used names at most {TOOLS_MAX} tools")));
    }
    for tool in &feedback.tools_used {
        check("tools_used[]", tool, TOOL_NAME_MAX_CHARS)?;
        if tool.contains('\n') {
            return Err(AppError::invalid("INVALID_VALUE", "a tool name in tools_used is one line"));
        }
    }
    services.store.add_feedback(feedback, services.clock.now().date_naive(), KEEP).await?;
    services.metrics.feedback_received.inc();
    Ok(())
}
