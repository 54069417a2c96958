-- RFC 3161 time-stamp tokens over checkpoints: the DER of each token (a CMS
-- ContentInfo), checked against the configured roots before it is kept, and
-- the TSA that gave it. One per checkpoint at most.
create table log_timestamp (
    size bigint primary key references log_checkpoint (size),
    tsa text not null,
    token bytea not null,
    gen_time timestamptz not null,
    stamped_at timestamptz not null
);
