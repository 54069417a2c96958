-- Signed statements registered through SCRAPI (decision 0066): each one's
-- identity (SHA-256 of the statement without its unprotected header), who
-- signed it and about what, and its leaf; never its payload. A statement is
-- a leaf of the same log as the declarations: it waits while leaf_index is
-- null and the same integrator gives it its index, in the order it came.
create table scitt_entry (
    entry_id bytea primary key,
    issuer text not null,
    subject text not null,
    kid bytea not null,
    content_type text,
    payload_bytes bigint not null,
    leaf_data bytea not null,
    registered_at timestamptz not null,
    leaf_index bigint unique,
    integrated_at timestamptz
);
create index scitt_entry_pending on scitt_entry (registered_at, entry_id) where leaf_index is null;
