-- Witnesses of the log (C2SP tlog-witness): what each configured witness
-- holds of this log, and the cosignatures they returned, each checked before
-- it is kept. A witness is named by its verifier key.
create table log_witness (
    witness text primary key,
    size integer not null check (size >= 0),
    updated_at text not null
);

create table log_cosignature (
    size integer not null references log_checkpoint (size),
    witness text not null,
    line text not null,
    signed_at integer not null,
    primary key (size, witness)
);
