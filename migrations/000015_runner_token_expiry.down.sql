DROP INDEX IF EXISTS runners_previous_token_hash_key;
ALTER TABLE runners
    DROP CONSTRAINT IF EXISTS runners_previous_token_expires,
    DROP COLUMN IF EXISTS registration_type,
    DROP COLUMN IF EXISTS previous_token_expires_at,
    DROP COLUMN IF EXISTS previous_token_hash,
    DROP COLUMN IF EXISTS token_expires_at;
