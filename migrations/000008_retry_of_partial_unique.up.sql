-- retry_of and retried_by are NULL on nearly every build, yet their UNIQUE constraints put
-- an entry for each NULL in their indexes, and every state change of a build (a new row
-- version: claim, ack, finish) added one to both. Partial unique indexes hold only the
-- non-NULL values, which is all the uniqueness is about (one retry per build). Built
-- CONCURRENTLY (no write lock on builds), each alone in its file; 000010 drops the old
-- constraints once both exist.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS builds_retry_of_uniq ON builds (retry_of)
WHERE retry_of IS NOT NULL;
