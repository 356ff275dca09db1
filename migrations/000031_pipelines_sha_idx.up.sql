-- A commit's statuses (GET /projects/:id/repository/commits/:sha/statuses) find the
-- project's pipelines at the commit here instead of reading all of the project's pipelines.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pipelines_project_sha_idx ON pipelines (project_id, sha);
