-- Runners without tags can run untagged builds only: their claim (claimUntaggedCandidate)
-- reads this index, which holds nothing else, instead of walking builds_pending_idx past
-- every tagged build queued before the first untagged one (all of them when none is
-- untagged). CONCURRENTLY: no write lock on builds while it builds; alone in its file
-- because it cannot run inside a transaction.
CREATE INDEX CONCURRENTLY IF NOT EXISTS builds_pending_untagged_idx ON builds (queued_at, id)
WHERE status = 'pending' AND cardinality(tags) = 0;
