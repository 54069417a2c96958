-- A share's distributions, found by the share: the human-share listing
-- counts and sums them per share, reading the whole table without it.
create index tsl_distribution_by_share on tsl_distribution (share_id);
