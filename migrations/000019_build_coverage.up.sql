-- .gitlab-ci.yml's coverage (issue 17): the percentage the job's coverage regex found in its
-- log when it finished; NULL when the job has no regex or the log had no match.
ALTER TABLE builds ADD COLUMN coverage numeric;

-- Auto-cancel (interruptible, issue 17) looks up a project's alive pipelines of one ref each
-- time a pipeline is created from .gitlab-ci.yml: a small partial index, as alive pipelines
-- are few.
CREATE INDEX pipelines_alive_ref_idx ON pipelines (project_id, ref, id)
    WHERE status IN ('created', 'pending', 'running', 'scheduled');
