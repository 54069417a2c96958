-- What counts against an agent's DAB (its payments reserved or settled,
-- by the calendar month, UTC, they were made in) kept as a running total
-- per agent and month, so a DAB check reads one row instead of summing
-- every payment the agent made in the month (on every 402 and every paid
-- create). A trigger keeps it: a payment entering or leaving the counted
-- statuses adds or takes away its amount, in the statement that moves it.
create table dab_spent (
    agent_id uuid not null,
    period text not null, -- 'YYYY-MM' (UTC)
    spent_units bigint not null,
    primary key (agent_id, period)
) with (fillfactor = 50);
-- Updated on every paid create of its agent: room on its page lets each
-- update stay there (HOT), as the agent table's does (0032).

insert into dab_spent (agent_id, period, spent_units)
select agent_id, to_char(created_at at time zone 'UTC', 'YYYY-MM'), sum(amount_units)
from x402_payment where status in ('reserved', 'settled')
group by 1, 2;

create function dab_spent_follow() returns trigger language plpgsql as $$
declare
    counted_before bigint := 0;
    counted_after bigint := 0;
begin
    if tg_op = 'UPDATE' and old.status in ('reserved', 'settled') then
        counted_before := old.amount_units;
    end if;
    if new.status in ('reserved', 'settled') then
        counted_after := new.amount_units;
    end if;
    if counted_after <> counted_before then
        insert into dab_spent as s (agent_id, period, spent_units)
        values (new.agent_id, to_char(new.created_at at time zone 'UTC', 'YYYY-MM'), counted_after - counted_before)
        on conflict (agent_id, period) do update set spent_units = s.spent_units + excluded.spent_units;
    end if;
    return null;
end $$;

create trigger x402_payment_dab after insert or update of status on x402_payment
for each row execute function dab_spent_follow();
