DROP INDEX CONCURRENTLY IF EXISTS pipelines_project_sha_idx;
