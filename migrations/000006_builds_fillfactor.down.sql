ALTER TABLE builds RESET (fillfactor);
