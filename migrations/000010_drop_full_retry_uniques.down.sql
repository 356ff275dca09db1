ALTER TABLE builds ADD CONSTRAINT builds_retry_of_key UNIQUE (retry_of),
                   ADD CONSTRAINT builds_retried_by_key UNIQUE (retried_by);
