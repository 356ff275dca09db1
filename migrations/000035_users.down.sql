DROP TABLE personal_access_tokens;
DROP TABLE users;
