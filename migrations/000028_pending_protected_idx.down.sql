DROP INDEX CONCURRENTLY IF EXISTS builds_pending_protected_idx;
