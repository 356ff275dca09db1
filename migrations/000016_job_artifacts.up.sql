-- Job artifacts (issue 14): the archive and the reports a job uploads. The bytes live in the
-- object store (JOBAPI_OBJECT_STORE) under object_key; a row is written only once its object
-- is complete, so a row always names a whole object.
CREATE TABLE job_artifacts (
    id           bigserial   PRIMARY KEY,
    build_id     bigint      NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    project_id   bigint      NOT NULL,
    pipeline_id  bigint      NOT NULL,
    -- GitLab's artifact_type (archive, junit, dotenv…) and artifact_format.
    file_type    text        NOT NULL,
    file_format  text        NOT NULL CHECK (file_format IN ('zip', 'gzip', 'raw')),
    filename     text        NOT NULL,
    size         bigint      NOT NULL CHECK (size >= 0),
    sha256       bytea       NOT NULL CHECK (length(sha256) = 32),
    object_key   text        NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    -- NULL: kept until deleted (expire_in: never).
    expire_at    timestamptz,
    -- One artifact of a type per job, as in GitLab: the same bytes again are accepted, other
    -- bytes refused.
    UNIQUE (build_id, file_type)
);
CREATE INDEX job_artifacts_expire_idx ON job_artifacts (expire_at) WHERE expire_at IS NOT NULL;

-- Objects no committed row references, to be deleted from the object store once due: an
-- upload in progress is registered here before its first byte, due when it could no longer
-- be running (so a replica killed mid-upload leaves nothing that outlives the next pass), and
-- its row is removed in the transaction that commits the artifact; a deleted artifact's
-- object is due at once. The artifacts pass deletes the object, then the row.
CREATE TABLE object_cleanup (
    object_key  text        PRIMARY KEY,
    due_at      timestamptz NOT NULL
);
CREATE INDEX object_cleanup_due_idx ON object_cleanup (due_at);

-- Whatever deletes an artifact row (operator, expiry, a build or pipeline removed with its
-- rows) queues its object: no object outlives its row by more than one pass.
CREATE FUNCTION job_artifacts_queue_cleanup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO object_cleanup (object_key, due_at) VALUES (OLD.object_key, '-infinity')
    ON CONFLICT (object_key) DO UPDATE SET due_at = '-infinity';
    RETURN NULL;
END
$$;
CREATE TRIGGER job_artifacts_cleanup AFTER DELETE ON job_artifacts
    FOR EACH ROW EXECUTE FUNCTION job_artifacts_queue_cleanup();

-- The latest successful pipeline of each ref keeps its artifacts past expire_at (GitLab's
-- "keep artifacts from the most recent successful jobs"); the expiry pass asks this index.
CREATE INDEX pipelines_success_ref_idx ON pipelines (project_id, ref, id) WHERE status = 'success';

-- A dependent job downloads with its own job token: its build is found by the token's hash.
-- Only builds on a runner may use their token, so only they are indexed.
CREATE INDEX builds_running_token_idx ON builds (token_hash) WHERE status IN ('running', 'canceling');
