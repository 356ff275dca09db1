-- A project's job list (GET /projects/:id/jobs) walks this index backwards, newest first,
-- instead of every build of every project. CONCURRENTLY and alone in its file, as
-- builds_pending_untagged_idx (000005).
CREATE INDEX CONCURRENTLY IF NOT EXISTS builds_project_idx ON builds (project_id, id);
