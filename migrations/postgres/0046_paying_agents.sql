-- A batch of creates paid over x402 in one statement (decision 0090): the
-- agents paying are locked, in agent order, and read again with their DAB
-- spending by this function, whose queries each see every transaction
-- committed before they start (a volatile function's do, under read
-- committed), so the spending it returns counts every payment committed
-- while it waited for a lock. The statement calling it checks each DAB
-- against that, and the locks hold until it commits. Before, a batch took
-- a transaction of its own: begin, the locks, the statement and commit,
-- four round trips instead of one. The locks are the same, so hosts of
-- both builds exclude each other. An expand migration: older builds never
-- call it.
create function paying_agents(agents uuid[], since text)
returns table (
    agent_id uuid,
    token_hash bytea,
    trial_balance_milli bigint,
    trial_expires_at timestamptz,
    dab_limit_milli bigint,
    spent_units bigint
)
language plpgsql volatile as $$
begin
    perform 1 from agent a where a.agent_id = any(agents) order by a.agent_id for no key update of a;
    return query
    select a.agent_id, a.token_hash, a.trial_balance_milli, a.trial_expires_at, a.dab_limit_milli,
           cast(coalesce((select sum(s.spent_units) from dab_spent s
                          where s.agent_id = a.agent_id and s.period >= since), 0) as bigint)
    from agent a where a.agent_id = any(agents);
end $$;
insert into migration_rules (version, runs_beside_builds_from) values (46, 0);
