-- Runner token expiry (JOBAPI_RUNNER_TOKEN_EXPIRES_IN) and rotation. A token issued while
-- expiry is on carries token_expires_at; NULL never expires. When a runner resets its own
-- token, the one it presented stays valid until previous_token_expires_at (the rotation
-- grace), so that requests already under way with it, and a runner that lost the answer,
-- are not locked out. An operator's reset clears the previous token: it revokes.
ALTER TABLE runners
    ADD COLUMN token_expires_at          timestamptz,
    ADD COLUMN previous_token_hash       bytea,
    ADD COLUMN previous_token_expires_at timestamptz,
    -- GitLab's registration_type: a runner registered with a registration token (POST
    -- /runners) gets glrtr- tokens, one created by an operator glrt- tokens. gitlab-runner's
    -- unregister deletes the former (DELETE /runners) and only its manager for the latter.
    ADD COLUMN registration_type         text NOT NULL DEFAULT 'authenticated_user'
        CHECK (registration_type IN ('authenticated_user', 'registration_token')),
    ADD CONSTRAINT runners_previous_token_expires
        CHECK ((previous_token_hash IS NULL) = (previous_token_expires_at IS NULL));

-- A token is looked up by either hash; runners is small, so no CONCURRENTLY is needed.
CREATE UNIQUE INDEX runners_previous_token_hash_key ON runners (previous_token_hash)
    WHERE previous_token_hash IS NOT NULL;
