DROP INDEX CONCURRENTLY IF EXISTS builds_pending_untagged_idx;
