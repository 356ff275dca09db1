DROP TABLE IF EXISTS user_identities;
