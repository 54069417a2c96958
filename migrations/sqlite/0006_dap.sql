-- The owner portal (DAP): owner accounts, their server-side sessions, failed
-- login attempts (for the login rate limit), and when an agent was linked.
-- Secrets are never stored: passwords as argon2id PHC strings, session ids
-- as SHA-256.

create table owner (
    owner_id blob primary key,
    -- Lower-cased. Null for agent-type owners, which sign in with their agent's token.
    email text unique,
    password_hash text,
    owner_type text not null default 'human',
    managing_agent_id blob unique,
    parent_owner_id blob references owner (owner_id),
    owner_depth integer not null default 0,
    browser_language text,
    timezone text,
    residence_country text,
    residence_declared_at text,
    residence_updated_at text,
    content_inclusion_policy text not null default 'agent_choice',
    terms_agreed_at text not null,
    privacy_agreed_at text not null,
    marketing_agreed_at text,
    terms_version text not null,
    privacy_version text not null,
    deletion_requested_at text,
    deletion_response_due_at text,
    -- Set when the grace period ended and the account was erased.
    deleted_at text,
    created_at text not null
);

create table owner_session (
    session_hash blob primary key,
    owner_id blob not null references owner (owner_id),
    created_at text not null,
    expires_at text not null
);
create index owner_session_by_owner on owner_session (owner_id);

create table owner_login_failure (
    email text not null,
    attempted_at text not null
);
create index owner_login_failure_by_email on owner_login_failure (email, attempted_at);

alter table agent add column linked_at text;
create index agent_by_owner on agent (owner_id);
