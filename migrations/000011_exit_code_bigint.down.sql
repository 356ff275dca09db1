-- Exit codes that integer cannot hold are dropped rather than failing the rollback.
ALTER TABLE builds ALTER COLUMN exit_code TYPE integer
    USING CASE WHEN exit_code BETWEEN -2147483648 AND 2147483647 THEN exit_code END;
