-- A payment whose settlement outcome is unknown (the facilitator did not
-- answer in time) may have moved its money: it counts against the DAB as
-- a reserved or settled one does. Before, moving a payment to
-- settle_unknown took its amount out of the running total (0033), and
-- the room it left could be spent again before the reconciliation
-- settled it. The counted statuses are now the live ones of 0034's
-- live_subject: reserved, settled, settle_unknown.
lock table x402_payment in exclusive mode;

create or replace function dab_spent_follow() returns trigger language plpgsql as $$
declare
    counted_before bigint := 0;
    counted_after bigint := 0;
begin
    if tg_op = 'UPDATE' and old.status in ('reserved', 'settled', 'settle_unknown') then
        counted_before := old.amount_units;
    end if;
    if new.status in ('reserved', 'settled', 'settle_unknown') then
        counted_after := new.amount_units;
    end if;
    if counted_after <> counted_before then
        insert into dab_spent as s (agent_id, period, spent_units)
        values (new.agent_id, to_char(new.created_at at time zone 'UTC', 'YYYY-MM'), counted_after - counted_before)
        on conflict (agent_id, period) do update set spent_units = s.spent_units + excluded.spent_units;
    end if;
    return null;
end $$;

drop trigger x402_payment_dab_insert on x402_payment;
drop trigger x402_payment_dab_update on x402_payment;
create trigger x402_payment_dab_insert after insert on x402_payment
for each row when (new.status in ('reserved', 'settled', 'settle_unknown')) execute function dab_spent_follow();
create trigger x402_payment_dab_update after update of status on x402_payment
for each row when ((old.status in ('reserved', 'settled', 'settle_unknown')) <> (new.status in ('reserved', 'settled', 'settle_unknown')))
execute function dab_spent_follow();

-- The totals again, counting the payments unknown now.
delete from dab_spent;
insert into dab_spent (agent_id, period, spent_units)
select agent_id, to_char(created_at at time zone 'UTC', 'YYYY-MM'), sum(amount_units)
from x402_payment where status in ('reserved', 'settled', 'settle_unknown')
group by 1, 2;
