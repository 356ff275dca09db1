package pgflags

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// selectFlags reads flags with their actors in one statement, so a flag is never seen
// half-changed. $1 NULL selects every flag.
const selectFlags = `
SELECT f.name, f.enabled, f.percentage_of_actors,
       coalesce(array_agg(a.actor ORDER BY a.actor) FILTER (WHERE a.actor IS NOT NULL), '{}')
FROM feature_flags f
LEFT JOIN feature_flag_actors a ON a.name = f.name
WHERE $1::text IS NULL OR f.name = $1
GROUP BY f.name
ORDER BY f.name`

// querier is what loadFlags needs from a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// loadFlags returns the flag called name, or every flag when name is nil.
func loadFlags(ctx context.Context, q querier, name *string) ([]flagRow, error) {
	rows, err := q.Query(ctx, selectFlags, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[flagRow])
}
