-- Leave a fifth of each new builds page free, so that an update which changes no indexed
-- column (a trace append, a runner's keep-alive) can put the new row version on the same
-- page: a HOT update, which writes no index entry. Applies to pages written from now on.
ALTER TABLE builds SET (fillfactor = 80);
