DROP INDEX CONCURRENTLY IF EXISTS builds_retried_by_uniq;
