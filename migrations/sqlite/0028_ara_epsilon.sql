-- The differential-privacy ledger of ARA releases: for each kind of release
-- and each day of data, the epsilon every stored release of that kind whose
-- window covers the day spent, in millionths. A release is stored only if
-- no day of its window would go past the configured budget.
create table ara_epsilon (
    kind text not null,
    day integer not null,
    epsilon_micro bigint not null check (epsilon_micro >= 0),
    primary key (kind, day)
);
