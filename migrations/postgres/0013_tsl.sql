-- The tool market (TSL): tools and the observations they read, their
-- dependencies, purchases, how each sale's price was shared (revenue shares,
-- the owner's human share, the seller's rest), and transfer declarations.
-- Rates are parts per million. A purchase row is written with its payment's
-- reservation and completed in the transaction that records the settlement,
-- together with the Earned DAC lots its price becomes.

create table tsl_tool (
    tool_id uuid primary key,
    seller_agent_id uuid not null references agent (agent_id),
    registered_by uuid not null references agent (agent_id),
    tool_name text not null,
    tool_description text,
    layer text not null check (layer in ('layer1', 'layer2')),
    price_milli bigint not null check (price_milli > 0),
    status text not null default 'active' check (status in ('active', 'suspended', 'deprecated', 'defunct')),
    registered_at timestamptz not null,
    updated_at timestamptz not null
);
create index tsl_tool_by_time on tsl_tool (registered_at, tool_id);
create index tsl_tool_by_seller on tsl_tool (seller_agent_id);

create table tsl_tool_connection (
    tool_id uuid not null references tsl_tool (tool_id),
    position integer not null,
    observation_type text not null,
    resolution_level integer not null check (resolution_level between 1 and 3),
    primary key (tool_id, position)
);

create table tsl_purchase (
    purchase_id uuid primary key,
    tool_id uuid not null references tsl_tool (tool_id),
    buyer_agent_id uuid not null references agent (agent_id),
    seller_agent_id uuid not null references agent (agent_id),
    request_id uuid,
    layer text not null check (layer in ('layer1', 'layer2')),
    price_milli bigint not null check (price_milli > 0),
    fee_milli bigint not null check (fee_milli >= 0),
    earned_expiry_days integer not null check (earned_expiry_days > 0),
    payment_id uuid not null references x402_payment (payment_id),
    status text not null check (status in ('pending', 'completed', 'failed')),
    created_at timestamptz not null,
    completed_at timestamptz,
    unique (buyer_agent_id, request_id)
);
-- One live purchase of a tool per buyer: a second one, even a concurrent one, is refused.
create unique index tsl_purchase_live on tsl_purchase (tool_id, buyer_agent_id) where status <> 'failed';
create index tsl_purchase_by_buyer on tsl_purchase (buyer_agent_id, created_at);
create index tsl_purchase_by_seller on tsl_purchase (seller_agent_id, created_at);
create index tsl_purchase_by_payment on tsl_purchase (payment_id);

create table tsl_dependency (
    tool_id uuid not null references tsl_tool (tool_id),
    depends_on_tool_id uuid not null references tsl_tool (tool_id),
    purchase_id uuid references tsl_purchase (purchase_id),
    created_at timestamptz not null,
    primary key (tool_id, depends_on_tool_id),
    check (tool_id <> depends_on_tool_id)
);

-- One row, locked by every dependency insert, so that two concurrent inserts
-- cannot close a cycle neither of them sees.
create table tsl_graph_lock (lock_id integer primary key);
insert into tsl_graph_lock (lock_id) values (1);

create table tsl_revenue_share (
    share_id uuid primary key,
    tool_id uuid not null references tsl_tool (tool_id),
    component_tool_id uuid not null references tsl_tool (tool_id),
    beneficiary_agent_id uuid not null references agent (agent_id),
    rate_ppm integer not null check (rate_ppm between 0 and 1000000),
    created_by uuid not null references agent (agent_id),
    created_at timestamptz not null,
    unique (tool_id, component_tool_id, beneficiary_agent_id)
);

create table tsl_human_share (
    human_share_id uuid primary key,
    owner_id uuid not null references owner (owner_id),
    agent_id uuid not null references agent (agent_id),
    tool_id uuid not null references tsl_tool (tool_id),
    rate_ppm integer not null check (rate_ppm between 0 and 500000),
    created_at timestamptz not null,
    ended_at timestamptz,
    end_reason text
);
create unique index tsl_human_share_live on tsl_human_share (tool_id) where ended_at is null;
create index tsl_human_share_by_owner on tsl_human_share (owner_id, created_at);

create table tsl_distribution (
    distribution_id uuid primary key,
    purchase_id uuid not null references tsl_purchase (purchase_id),
    kind text not null check (kind in ('seller', 'revenue_share', 'human_share')),
    agent_id uuid not null references agent (agent_id),
    owner_id uuid references owner (owner_id),
    share_id uuid,
    rate_ppm integer,
    amount_milli bigint not null check (amount_milli >= 0),
    earned_entry_id uuid references earned_entry (entry_id),
    created_at timestamptz not null
);
create index tsl_distribution_by_purchase on tsl_distribution (purchase_id);
create index tsl_distribution_by_agent on tsl_distribution (agent_id, created_at);
create index tsl_distribution_by_owner on tsl_distribution (owner_id, created_at) where owner_id is not null;

create table tsl_transfer (
    transfer_id uuid primary key,
    tool_id uuid not null references tsl_tool (tool_id),
    declared_by uuid not null references agent (agent_id),
    action text not null check (action in ('transfer', 'retire')),
    target_agent_id uuid references agent (agent_id),
    status text not null check (status in ('pending', 'cancelled', 'executed')),
    declared_at timestamptz not null,
    effective_at timestamptz not null,
    ended_at timestamptz,
    check (action = 'retire' or target_agent_id is not null)
);
create unique index tsl_transfer_pending on tsl_transfer (tool_id) where status = 'pending';
create index tsl_transfer_due on tsl_transfer (effective_at) where status = 'pending';
