-- Accounts at an OpenID Provider linked to jobapi users: keyed by the provider's issuer and
-- the account's subject (never its username), so that an account renamed at the provider
-- stays one user here. A user's first single sign-on creates the user and this row in one
-- transaction.
CREATE TABLE user_identities (
    issuer      text        NOT NULL,
    subject     text        NOT NULL,
    user_id     bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX user_identities_user_idx ON user_identities (user_id);
