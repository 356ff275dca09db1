-- The latest attempts of a pipeline's DAG jobs and of the jobs they need, by name: what a
-- finish reads to decide the needers of the job that ended. Only builds that take part in
-- needs are in it, so a stage pipeline's transitions never touch it. CONCURRENTLY and
-- alone in its file, as builds_pending_untagged_idx (000005).
CREATE INDEX CONCURRENTLY IF NOT EXISTS builds_pipeline_dag_idx ON builds (pipeline_id, name)
    WHERE retried_by IS NULL AND (needs IS NOT NULL OR cardinality(needed_by) > 0);
