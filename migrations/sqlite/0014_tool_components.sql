-- Tools that run: the components sellers upload, kept whole so that every
-- host sharing the database can compile them (the compiled form is each
-- host's own disk cache), and the metadata of each run: who ran which
-- component, when, with what outcome and how many instructions. A run's
-- input and output are never stored.

create table tsl_tool_component (
    tool_id blob not null references tsl_tool (tool_id),
    version integer not null check (version > 0),
    sha256 blob not null,
    size_bytes integer not null check (size_bytes > 0),
    wasm blob not null,
    uploaded_by blob not null references agent (agent_id),
    uploaded_at text not null,
    primary key (tool_id, version)
);
create index tsl_tool_component_by_hash on tsl_tool_component (sha256);

create table tsl_tool_run (
    run_id blob primary key,
    tool_id blob not null references tsl_tool (tool_id),
    version integer not null,
    sha256 blob not null,
    runner_agent_id blob not null references agent (agent_id),
    started_at text not null,
    wall_micros integer not null,
    outcome text not null,
    fuel_used integer,
    output_bytes integer,
    charged_milli integer not null default 0,
    payment_id blob references x402_payment (payment_id)
);
create index tsl_tool_run_by_runner on tsl_tool_run (runner_agent_id, started_at);
create index tsl_tool_run_by_tool on tsl_tool_run (tool_id, started_at);
