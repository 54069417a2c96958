-- The browsers an owner signed in from (decision 0064): a sign-in that
-- carries one is held to that device's own attempt limit, never to the
-- limit over every client, so guessing from elsewhere cannot lock the owner
-- out of its own browser. Only the device secret's SHA-256 is kept.
create table owner_device (
    device_hash blob primary key,
    owner_id blob not null references owner (owner_id),
    created_at text not null
);
create index owner_device_by_owner on owner_device (owner_id, created_at);
