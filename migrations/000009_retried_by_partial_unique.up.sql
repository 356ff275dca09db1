-- See 000008.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS builds_retried_by_uniq ON builds (retried_by)
WHERE retried_by IS NOT NULL;
