package pgstore

import (
	"context"
	"fmt"
)

// setCoverage writes a finished build's coverage; a build still on a runner is left alone
// (its log is not complete).
const setCoverage = `UPDATE builds SET coverage = $2 WHERE id = $1 AND finished_at IS NOT NULL`

// SetCoverage records the coverage found in a finished build's log.
func (s *Store) SetCoverage(ctx context.Context, id int64, coverage float64) error {
	if _, err := s.pool.Exec(ctx, setCoverage, id, coverage); err != nil {
		return fmt.Errorf("set coverage of build %d: %w", id, err)
	}
	return nil
}
