-- Archived logs keep their job_artifacts rows and objects: going down loses no log, though
-- the older code reads logs from build_trace_chunks only.
DROP TRIGGER builds_trace_archive ON builds;
DROP FUNCTION builds_queue_trace_archive();
DROP TABLE trace_archives;
