-- Limits on password and recovery-key attempts, counted so they hold under
-- concurrency: one row per (scope, subject) with a fixed window and the
-- attempts used in it. An attempt is reserved by one conditional upsert before
-- the secret is checked, so parallel attempts can never pass the limit; a
-- successful one gives its reservation back.
--
-- scope: owner_password (subject: the email, or owner:<id> for an owner
-- without one) or agent_recovery (subject: the agent_id).

create table attempt_window (
    scope text not null,
    subject text not null,
    window_start timestamptz not null,
    used integer not null check (used >= 0),
    primary key (scope, subject)
);

drop table owner_login_failure;
drop table recovery_attempt;
