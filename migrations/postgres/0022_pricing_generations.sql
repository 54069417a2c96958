-- Pricing generations an operator published (`anchor pricing publish`):
-- each component once, by its hash, and when each becomes the one in force.
-- Every host sharing the database loads them and switches at that time.
create table pricing_component (
    sha256 text primary key,
    version text not null,
    interface text not null,
    wasm bytea not null
);

create table pricing_activation (
    activate_at timestamptz primary key,
    sha256 text not null references pricing_component (sha256),
    published_at timestamptz not null
);
