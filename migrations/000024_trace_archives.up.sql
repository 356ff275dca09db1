-- Job logs archived into the object store (issue 14, part 5). A finished build's live log
-- (build_trace_chunks, or wherever builds.LiveLog keeps it) is written as one object and
-- recorded as a job_artifacts row of file_type 'trace' (GitLab's job.log), then the live
-- chunks are deleted. A build is listed here from the moment it finishes until its log is
-- archived and its live chunks are gone: the archive pass on every replica works through
-- this list (SKIP LOCKED), so a store outage or a replica killed at the wrong moment delays
-- an archive, never loses a log.
CREATE TABLE trace_archives (
    build_id     bigint      PRIMARY KEY REFERENCES builds (id) ON DELETE CASCADE,
    -- When a pass may take the build next: '-infinity' at once; a claim moves it past the
    -- claim's lease, a failure past its backoff.
    due_at       timestamptz NOT NULL DEFAULT '-infinity',
    attempts     integer     NOT NULL DEFAULT 0,
    -- Set when the trace artifact row is committed; the row goes once the live chunks are
    -- dropped.
    archived_at  timestamptz,
    last_error   text
);
CREATE INDEX trace_archives_due_idx ON trace_archives (due_at);

-- Every path that ends a build (the runner's final update, a cancel, the ack sweeper, the
-- reapers, the stuck-stage check, a runner deleted, the trace limit, and any added later)
-- lists it here in the same transaction: none can forget to.
CREATE FUNCTION builds_queue_trace_archive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO trace_archives (build_id) VALUES (NEW.id) ON CONFLICT (build_id) DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER builds_trace_archive AFTER UPDATE OF status ON builds
    FOR EACH ROW
    WHEN (NEW.status IN ('success', 'failed', 'canceled') AND OLD.status NOT IN ('success', 'failed', 'canceled'))
    EXECUTE FUNCTION builds_queue_trace_archive();

-- Logs of builds that finished before this migration are archived by the first passes.
INSERT INTO trace_archives (build_id)
SELECT DISTINCT c.build_id FROM build_trace_chunks c JOIN builds b ON b.id = c.build_id
WHERE b.status IN ('success', 'failed', 'canceled');
