DROP TABLE id_token_signing_keys;
