-- The partial unique indexes of 000008 and 000009 now enforce the same rule.
ALTER TABLE builds DROP CONSTRAINT IF EXISTS builds_retry_of_key,
                   DROP CONSTRAINT IF EXISTS builds_retried_by_key;
