-- The DAB check sums an agent's external spending in the current period on
-- every paid request: without this index it read every payment row ever made.
create index x402_payment_by_agent on x402_payment (agent_id, created_at);
