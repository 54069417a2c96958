-- RFC 3161 time-stamp tokens over checkpoints: the DER of each token (a CMS
-- ContentInfo), checked against the configured roots before it is kept, and
-- the TSA that gave it. One per checkpoint at most.
create table log_timestamp (
    size integer primary key references log_checkpoint (size),
    tsa text not null,
    token blob not null,
    gen_time text not null,
    stamped_at text not null
);
