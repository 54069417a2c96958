-- The core of the anchoring service: agents, declarations (DD with its EE),
-- the self-classification registry and usage entries (DAC-UR).
-- Money columns are integers of milli-DAC and end in `_milli`.

create table agent (
    agent_id blob primary key,
    -- SHA-256 of the bearer token and of the recovery key; the values are shown once.
    token_hash blob not null unique,
    recovery_hash blob not null,
    region_code text,
    disclosure_level text not null default 'summary',
    registered_at text not null,
    trial_granted_milli integer not null,
    -- The database itself refuses a negative Trial balance.
    trial_balance_milli integer not null check (trial_balance_milli >= 0),
    trial_expires_at text not null,
    owner_id blob
);

create table recovery_attempt (
    agent_id blob not null,
    attempted_at text not null
);
create index recovery_attempt_by_agent on recovery_attempt (agent_id, attempted_at);

-- Operator base categories have no owner; owners add their own (owner portal).
create table classification (
    classification_id blob primary key,
    owner_id blob,
    classification_key text not null,
    classification_label text not null,
    description text,
    active integer not null default 1,
    created_at text not null
);
create unique index classification_base_key on classification (classification_key) where owner_id is null;
create unique index classification_owner_key on classification (owner_id, classification_key) where owner_id is not null;

create table declaration (
    dd_id blob primary key,
    ee_id blob not null unique,
    agent_id blob not null references agent (agent_id),
    request_id blob not null,
    lineage_group_id blob not null,
    parent_dd_id blob references declaration (dd_id),

    dd_unit_type text not null,
    dd_declaration_mode text not null,
    decision_type text not null,
    decision_action_type text not null,
    origin_context_type text not null,
    selection_state text not null,
    selection_scope text,
    decision_at text,

    ee_preset text,
    ee_retention_period text not null,
    ee_integrity_verification_level text not null,
    ee_disclosure_format_policy text not null,
    ee_responsibility_scope text not null,
    content_disclosure_scope text not null,
    delegation_state text not null,
    ee_direct_access_period text not null,
    ee_direct_access_quota integer not null check (ee_direct_access_quota >= 0),
    access_class text not null,
    direct_access_expires_at text not null,
    direct_reads_used integer not null default 0,

    content_inclusion integer not null,
    tpl_decision_class text,
    tpl_decision_scale_value text,
    tpl_decision_scale_unit text,
    tpl_target_class text,
    tpl_call_chain text,
    tpl_self_classification text,
    tpl_decision_trigger text,
    tpl_human_involvement text,

    anchored_at text not null,
    salt blob not null,
    pricing_version text not null,
    pricing_sha256 text not null,
    dac_amount_milli integer not null,
    base_fee_milli integer not null,
    subtotal_milli integer not null,
    multiplier_permille integer not null,
    monthly_milli integer not null,
    base_fee_source text not null,
    premium_source text not null,
    trial_remaining_after_milli integer,
    settlement_status text not null,
    confirmed_at text,
    integrity_hash text,

    -- request_id idempotency is per agent.
    constraint declaration_request unique (agent_id, request_id),
    check (direct_reads_used <= ee_direct_access_quota)
);
create index declaration_by_agent on declaration (agent_id, anchored_at);
create index declaration_by_group on declaration (lineage_group_id);

-- One row per paid component of a confirmed declaration (DAC-UR).
create table usage_entry (
    usage_id blob primary key,
    agent_id blob not null references agent (agent_id),
    dd_id blob not null references declaration (dd_id),
    cost_component text not null,
    payment_source text not null,
    amount_milli integer not null,
    recorded_at text not null
);
create index usage_entry_by_agent on usage_entry (agent_id, recorded_at);
