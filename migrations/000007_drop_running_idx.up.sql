-- builds_running_idx indexed updated_at, which every trace append and keep-alive writes:
-- each of them had to add an entry to every index of builds (seven) instead of being a HOT
-- update. Its one reader, the reaper's scan for silent running and canceling builds, walks
-- builds_status_idx instead: it reads the running builds (as many as the fleet runs at
-- once) every maintenance interval, not on the hot path. CONCURRENTLY: no write lock on
-- builds; alone in its file because it cannot run inside a transaction.
DROP INDEX CONCURRENTLY IF EXISTS builds_running_idx;
