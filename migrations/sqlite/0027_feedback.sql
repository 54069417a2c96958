-- Anonymous feedback from agents (MCP submit_feedback): no agent id, token,
-- address or time of day is kept, only the UTC day it arrived and what it
-- says, each text bounded; the table keeps the newest 10,000 notes.
create table feedback (
    feedback_id integer primary key autoincrement,
    received_on text not null,
    note text,
    would_recommend text,
    recommend_reason text,
    would_report_to_operator text,
    report_reason text,
    would_keep_as_tool text,
    keep_reason text,
    tools_used text
);
