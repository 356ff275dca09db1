package faulttest_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// invariants are SPEC §11's checks, read from Postgres (the truth) after a test's load.
type invariants struct {
	// RetryMax is JOBAPI_AUTO_RETRY_MAX: attempts up to it are retried after a timeout.
	RetryMax int
	// Deadline, when > 0, is TTL + sweep interval + slack: the longest an unacknowledged
	// build may wait before the sweeper fails it (invariant 2's "within").
	Deadline time.Duration
	// Done requires every build to be finished (the load ran to the end).
	Done bool
}

// check runs invariants 1, 2 and 4 (3 is the runners' own check of late acks) and returns
// the number of builds by status, for the log.
func (iv invariants) check(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := func(what, sql string, args ...any) []string {
		t.Helper()
		rows, err := pool.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var out []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			out = append(out, fmt.Sprint(vals...))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return out
	}
	bad := func(what string, rows []string) {
		t.Helper()
		if len(rows) > 0 {
			if len(rows) > 10 {
				rows = append(rows[:10], fmt.Sprintf("… %d more", len(rows)-10))
			}
			t.Errorf("%s:\n  %s", what, strings.Join(rows, "\n  "))
		}
	}

	// 1. Assigned to at most one runner manager, at most once; running at most once.
	bad("invariant 1: builds assigned, acknowledged or started more than once", query("events",
		`SELECT build_id, ' ', type, ' ×', count(*) FROM build_events
		 WHERE type IN ('assigned', 'acknowledged', 'started')
		 GROUP BY build_id, type HAVING count(*) > 1`))
	bad("invariant 1: two-phase builds that ran without exactly one acknowledgement", query("acks",
		`SELECT b.id, ' ', b.status FROM builds b
		 WHERE b.two_phase AND b.started_at IS NOT NULL
		   AND (SELECT count(*) FROM build_events e WHERE e.build_id = b.id AND e.type = 'acknowledged') <> 1`))

	// 2. Every unacknowledged assignment failed with runner_provisioning_timeout, once, and
	// retried exactly once while the limit allows.
	bad("invariant 2: two-phase builds never acknowledged that are neither waiting nor timed out", query("unacked",
		`SELECT b.id, ' ', b.status, ' ', COALESCE(b.failure_reason, '') FROM builds b
		 WHERE b.two_phase AND b.started_at IS NULL AND b.status <> 'waiting_for_runner_ack'
		   AND NOT (b.status = 'failed' AND b.failure_reason = 'runner_provisioning_timeout')
		   AND b.status <> 'canceled'`))
	bad("invariant 2: timed-out builds without exactly one timeout and exactly one retry (or an exhausted limit)", query("retries",
		`SELECT b.id, ' attempt ', b.attempt, ' timeouts ', t.n, ' retries ', r.n, ' exhausted ', x.n FROM builds b
		 CROSS JOIN LATERAL (SELECT count(*) AS n FROM build_events e WHERE e.build_id = b.id AND e.type = 'ack_timeout') t
		 CROSS JOIN LATERAL (SELECT count(*) AS n FROM builds r WHERE r.retry_of = b.id) r
		 CROSS JOIN LATERAL (SELECT count(*) AS n FROM build_events e WHERE e.build_id = b.id AND e.type = 'retry_exhausted') x
		 WHERE b.failure_reason = 'runner_provisioning_timeout'
		   AND NOT (t.n = 1 AND ((b.attempt <= $1 AND r.n = 1 AND x.n = 0) OR (b.attempt > $1 AND r.n = 0 AND x.n = 1)))`,
		iv.RetryMax))
	bad("invariant 2: retries that do not match the build they retry", query("chain",
		`SELECT r.id, ' retry_of ', r.retry_of FROM builds r JOIN builds b ON b.id = r.retry_of
		 WHERE b.retried_by IS DISTINCT FROM r.id OR r.attempt <> b.attempt + 1 OR r.pipeline_id <> b.pipeline_id`))
	if iv.Deadline > 0 {
		bad(fmt.Sprintf("invariant 2: builds timed out later than %v after assignment", iv.Deadline), query("late",
			`SELECT b.id, ' after ', e.at - b.assigned_at FROM builds b JOIN build_events e ON e.build_id = b.id
			 WHERE e.type = 'ack_timeout' AND e.at - b.assigned_at > $1`, iv.Deadline))
		bad("invariant 2: builds still waiting past their deadline", query("overdue",
			`SELECT id, ' assigned ', now() - assigned_at, ' ago' FROM builds
			 WHERE status = 'waiting_for_runner_ack' AND assigned_at < now() - $1::interval`, iv.Deadline))
	}

	// 4. Nothing lost: every build is finished or legitimately pending, waiting or running.
	bad("invariant 4: builds in no known state", query("states",
		`SELECT id, ' ', status FROM builds WHERE status NOT IN
		 ('created', 'pending', 'waiting_for_runner_ack', 'running', 'canceling', 'success', 'failed', 'canceled', 'skipped')`))
	if iv.Done {
		bad("invariant 4: builds not finished after the load ran to its end", query("unfinished",
			`SELECT id, ' ', status FROM builds WHERE status NOT IN ('success', 'failed', 'canceled', 'skipped')`))
	}

	byStatus := map[string]int{}
	rows, err := pool.Query(ctx, "SELECT status, count(*) FROM builds GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		byStatus[s] = n
	}
	return byStatus
}

// statusLine formats counts by status in a stable order.
func statusLine(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// timedOutOnce checks that every build in ids was failed with runner_provisioning_timeout
// by exactly one sweep and has exactly one retry, pending as attempt 2: "every expired ack
// processed exactly once".
func timedOutOnce(t *testing.T, pool *pgxpool.Pool, ids []int64) {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT b.id, b.status, COALESCE(b.failure_reason, ''),
		        (SELECT count(*) FROM build_events e WHERE e.build_id = b.id AND e.type = 'ack_timeout'),
		        (SELECT count(*) FROM builds r WHERE r.retry_of = b.id AND r.status = 'pending' AND r.attempt = 2)
		 FROM builds b WHERE b.id = ANY($1)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id                int64
		status, reason    string
		timeouts, retries int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.status, &x.reason, &x.timeouts, &x.retries)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("%d of %d builds found", len(got), len(ids))
	}
	wrong := 0
	for _, r := range got {
		if r.status != "failed" || r.reason != "runner_provisioning_timeout" || r.timeouts != 1 || r.retries != 1 {
			if wrong++; wrong <= 10 {
				t.Errorf("build %d: %s/%s, %d timeouts, %d pending retries; want failed/runner_provisioning_timeout, 1, 1",
					r.id, r.status, r.reason, r.timeouts, r.retries)
			}
		}
	}
	if wrong > 10 {
		t.Errorf("… %d builds wrong in all", wrong)
	}
	if n := jobapitest.QueryInt(t, pool, "SELECT count(*) FROM builds WHERE retry_of = ANY($1)", ids); n != len(ids) {
		t.Errorf("%d retries of %d timed-out builds, want exactly one each", n, len(ids))
	}
}
