-- Keys that sign the ID tokens of .gitlab-ci.yml's id_tokens, when JOBAPI_ID_TOKEN_SIGNING_KEY
-- names no key file. The first replica to start generates one (under an advisory lock, so
-- replicas starting together agree on it); every replica signs with the newest and lists all
-- of them in GET /oauth/discovery/keys, so that a key can be rotated by inserting a newer
-- one and deleted once the longest job timeout has passed. The private key is held here in
-- clear: whoever reads this table can mint tokens, which is why a key file is the setting
-- for installations whose Postgres is shared more widely than jobapi itself.
CREATE TABLE id_token_signing_keys (
    id          bigserial   PRIMARY KEY,
    -- PKCS #8 PEM of an RSA key.
    private_key text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
