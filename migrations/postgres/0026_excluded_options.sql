-- How many options the agent considered and left out (DDInput's
-- excluded_option_count), when it says so: part of the hashed record.
alter table declaration add column excluded_option_count bigint check (excluded_option_count >= 0);
