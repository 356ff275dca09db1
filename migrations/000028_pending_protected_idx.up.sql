-- A ref_protected runner claims only protected builds: its claim reads this
-- index, which holds nothing else, instead of walking builds_pending_idx past every
-- unprotected build queued before the first protected one. CONCURRENTLY and alone in its
-- file, as builds_pending_untagged_idx (000005).
CREATE INDEX CONCURRENTLY IF NOT EXISTS builds_pending_protected_idx ON builds (queued_at, id)
WHERE status = 'pending' AND protected;
