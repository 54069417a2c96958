-- Settling a payment moves its status (and its reference and update time)
-- and nothing else. PostgreSQL can then write the new row version beside
-- the old one without touching any index (a HOT update) only if no index
-- names a column whose value changed, in its key or in its predicate, and
-- if the page has room. The subjects paid once at most (0015, 0016, 0018)
-- were kept unique among live payments by indexes whose predicate named
-- the status, so every settlement added an entry to each of the table's
-- indexes. Here the liveness is a column computed from the status, the
-- subject while the payment is live, null once it is not: settling keeps
-- its value, so the update stays on its page; a release clears it.
drop index x402_payment_one_per_stay;
drop index x402_payment_one_per_sdac;
drop index x402_payment_one_per_asa_purchase;

-- Rows are about 1.5 kB (the payment's payload): at half a page, each row
-- has room for its settled version on its own page. The table is
-- rewritten by the column below with this room left.
alter table x402_payment set (fillfactor = 50);

alter table x402_payment add column live_subject uuid
    generated always as (case when status in ('reserved', 'settled', 'settle_unknown') then subject_id end) stored;

create unique index x402_payment_one_per_stay on x402_payment (live_subject)
    where subject_domain = 'ise_session';
create unique index x402_payment_one_per_sdac on x402_payment (live_subject)
    where subject_domain = 'sdac_session';
create unique index x402_payment_one_per_asa_purchase on x402_payment (live_subject)
    where subject_domain = 'asa_subscription';

-- The DAB's running total (0033) moves only when a payment enters or
-- leaves the counted statuses. A settlement (reserved to settled) does
-- neither: the triggers' conditions, evaluated without calling the
-- function, leave it alone.
drop trigger x402_payment_dab on x402_payment;
create trigger x402_payment_dab_insert after insert on x402_payment
for each row when (new.status in ('reserved', 'settled')) execute function dab_spent_follow();
create trigger x402_payment_dab_update after update of status on x402_payment
for each row when ((old.status in ('reserved', 'settled')) <> (new.status in ('reserved', 'settled')))
execute function dab_spent_follow();
