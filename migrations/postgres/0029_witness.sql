-- Witnesses of the log (C2SP tlog-witness): what each configured witness
-- holds of this log, and the cosignatures they returned, each checked before
-- it is kept. A witness is named by its verifier key.
create table log_witness (
    witness text primary key,
    size bigint not null check (size >= 0),
    updated_at timestamptz not null
);

create table log_cosignature (
    size bigint not null references log_checkpoint (size),
    witness text not null,
    line text not null,
    signed_at bigint not null,
    primary key (size, witness)
);
