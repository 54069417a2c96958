-- The keys COSE receipts are signed with (decision 0065): every key a host
-- has signed with, by its kid (RFC 9679 thumbprint), with its public
-- COSE_Key, so the key set served at /.well-known/scitt-keys names the keys
-- of every host and keeps a retired key while receipts signed with it live.
create table receipt_key (
    kid blob primary key,
    cose_key blob not null,
    first_used_at text not null
);
