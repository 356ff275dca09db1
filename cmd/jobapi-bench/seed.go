package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// Seeding writes builds straight into jobapi's tables with INSERT … SELECT generate_series
// (or COPY when each row needs a value from Go), in pipelines of a few jobs each as a CI
// system holds them: a million builds take a minute instead of a million API calls.

const benchPayload = `{"script": ["echo bench"], "retry": {"max": 0}}`

const benchSHA = "0123456789abcdef0123456789abcdef01234567"

// seedSpec describes a batch of builds.
type seedSpec struct {
	N           int
	PerPipeline int
	// Status of the builds: pending, waiting_for_runner_ack (ack deadline in an hour) or
	// success (finished history).
	Status string
	Name   string
	Tags   []string
	// ReturnIDs collects the new builds' ids.
	ReturnIDs bool
}

// seedChunk bounds one statement, so progress shows and no transaction grows unbounded.
const seedChunk = 100_000

// seededIIDs numbers seeded pipelines by their id (unique, so unique within each project
// too) and moves the projects' counters past them, so that pipelines created later through
// the API get fresh iids. It follows a CTE p of the new pipelines.
const seededIIDs = `
), i AS (
    INSERT INTO pipeline_iids AS c (project_id, last_iid)
    SELECT project_id, max(iid) FROM p GROUP BY project_id
    ON CONFLICT (project_id) DO UPDATE SET last_iid = greatest(c.last_iid, excluded.last_iid)`

const seedBuilds = `
WITH p AS (
    INSERT INTO pipelines (id, iid, project_id, ref, sha, stages, status, created_at, updated_at, finished_at)
    SELECT n.id, n.id, 1 + n.g % 100, 'main', '` + benchSHA + `', '{test}',
           CASE $1::text WHEN 'pending' THEN 'pending' WHEN 'success' THEN 'success' ELSE 'running' END,
           now(), now(), CASE WHEN $1::text = 'success' THEN now() END
    FROM (SELECT nextval('pipelines_id_seq') AS id, g FROM generate_series(1, $2::int) g) n
    RETURNING id, iid, project_id
` + seededIIDs + `
), b AS (
    INSERT INTO builds (project_id, pipeline_id, stage, stage_idx, name, status, tags, payload, timeout_seconds,
        queued_at, created_at, updated_at, assigned_at, ack_deadline, started_at, finished_at,
        runner_final_state, two_phase)
    SELECT p.project_id, p.id, 'test', 0, $4::text || ' ' || j, $1::text, $5::text[], $6::jsonb, 3600,
        q.at, q.at, q.at,
        CASE WHEN $1::text <> 'pending' THEN now() END,
        CASE WHEN $1::text = 'waiting_for_runner_ack' THEN now() + interval '1 hour' END,
        CASE WHEN $1::text = 'success' THEN now() END,
        CASE WHEN $1::text = 'success' THEN now() END,
        CASE WHEN $1::text = 'success' THEN 'success' END,
        $1::text = 'waiting_for_runner_ack'
    FROM p CROSS JOIN generate_series(1, $3::int) j
    -- Oldest first follows the id order, all within the last two hours.
    CROSS JOIN LATERAL (SELECT now() - interval '2 hours' + (p.id * 100 + j) * interval '1 microsecond' AS at) q
    RETURNING id, status
), e AS (
    INSERT INTO build_events (build_id, type, at, detail)
    SELECT b.id, t, now(), '{}'::jsonb FROM b
    CROSS JOIN LATERAL unnest(CASE b.status
        WHEN 'pending' THEN ARRAY['queued']
        WHEN 'success' THEN ARRAY['queued', 'assigned', 'acknowledged', 'finished']
        ELSE ARRAY['queued', 'assigned'] END) t
)
SELECT CASE WHEN $7 THEN array_agg(id) ELSE '{}' END, count(*) FROM b`

func (e *env) seed(ctx context.Context, s seedSpec) ([]int64, error) {
	if s.PerPipeline <= 0 {
		s.PerPipeline = 10
	}
	if s.Name == "" {
		s.Name = "bench"
	}
	if s.Tags == nil {
		s.Tags = []string{}
	}
	start := time.Now()
	var ids []int64
	for done := 0; done < s.N; {
		n := min(seedChunk, s.N-done)
		// Whole pipelines, then one smaller pipeline for the remainder.
		for _, part := range [][2]int{{n / s.PerPipeline, s.PerPipeline}, {min(n%s.PerPipeline, 1), n % s.PerPipeline}} {
			if part[0] == 0 || part[1] == 0 {
				continue
			}
			var chunk []int64
			var count int64
			if err := e.db.QueryRow(ctx, seedBuilds, s.Status, part[0], part[1], s.Name, s.Tags, benchPayload,
				s.ReturnIDs).Scan(&chunk, &count); err != nil {
				return nil, fmt.Errorf("seed %d %s builds: %w", n, s.Status, err)
			}
			ids = append(ids, chunk...)
		}
		done += n
		if s.N > seedChunk {
			e.logf("  seeded %d/%d %s builds", done, s.N, s.Status)
		}
	}
	if s.N >= seedChunk {
		e.logf("  %d %s builds seeded in %s", s.N, s.Status, time.Since(start).Round(100*time.Millisecond))
	}
	// Written behind jobapi's back: bump the queue version as a write through jobapi would,
	// or a replica that recorded the profile as found empty at the old version answers 204.
	return ids, e.bumpQueue(ctx)
}

// assignedJob is a build already handed to a runner, waiting for its ack.
type assignedJob struct {
	ID    int64
	Token string
}

// seedAssigned writes n builds in waiting_for_runner_ack, each assigned to one of rs with
// a job token of its own, as the claim would have left them (deadline in an hour).
func (e *env) seedAssigned(ctx context.Context, n, perPipeline int, rs []*runner) ([]assignedJob, error) {
	if perPipeline <= 0 {
		perPipeline = 10
	}
	pipelines := (n + perPipeline - 1) / perPipeline
	rows, err := e.db.Query(ctx, `
WITH p AS (
    INSERT INTO pipelines (id, iid, project_id, ref, sha, stages, status)
    SELECT n.id, n.id, 1 + n.g % 100, 'main', '`+benchSHA+`', '{test}', 'running'
    FROM (SELECT nextval('pipelines_id_seq') AS id, g FROM generate_series(1, $1::int) g) n
    RETURNING id, iid, project_id
`+seededIIDs+`
)
SELECT id, project_id FROM p`, pipelines)
	if err != nil {
		return nil, err
	}
	type pl struct{ id, project int64 }
	pls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pl, error) {
		var p pl
		return p, r.Scan(&p.id, &p.project)
	})
	if err != nil {
		return nil, err
	}
	var ids []int64
	if err := e.db.QueryRow(ctx, `SELECT array_agg(nextval('builds_id_seq')) FROM generate_series(1, $1::int)`, n).Scan(&ids); err != nil {
		return nil, err
	}
	now := time.Now()
	jobs := make([]assignedJob, n)
	data := make([][]any, n)
	for i := range n {
		p := pls[i/perPipeline]
		r := rs[i%len(rs)]
		token := secrettoken.New(builds.JobTokenPrefix)
		jobs[i] = assignedJob{ID: ids[i], Token: token}
		data[i] = []any{ids[i], p.project, p.id, "test", 0, fmt.Sprintf("ack %d", i), string(builds.StatusWaiting),
			secrettoken.Hash(token), []string{}, benchPayload, 3600, r.ID, r.ManagerID, true,
			now, now, now, now, now.Add(time.Hour)}
	}
	if _, err := e.db.CopyFrom(ctx, pgx.Identifier{"builds"}, []string{"id", "project_id", "pipeline_id", "stage",
		"stage_idx", "name", "status", "token_hash", "tags", "payload", "timeout_seconds", "runner_id",
		"runner_manager_id", "two_phase", "queued_at", "created_at", "updated_at", "assigned_at", "ack_deadline"},
		pgx.CopyFromRows(data)); err != nil {
		return nil, fmt.Errorf("copy assigned builds: %w", err)
	}
	if _, err := e.db.Exec(ctx, `
INSERT INTO build_events (build_id, type, at, detail)
SELECT id, t, now(), '{}'::jsonb FROM unnest($1::bigint[]) id, unnest(ARRAY['queued', 'assigned']) t`, ids); err != nil {
		return nil, err
	}
	return jobs, nil
}

// truncate empties the build tables (runners stay). jobapi's background workers keep
// running meanwhile (the trace archive pass commits an artifact row, then its build's
// archive mark), and TRUNCATE takes its locks table by table: Postgres may end it as one
// side of a deadlock, and then it is tried again.
func (e *env) truncate(ctx context.Context) error {
	var err error
	for try := range 5 {
		_, err = e.db.Exec(ctx, `TRUNCATE build_trace_chunks, trace_archives, build_events, job_artifacts, deployments, environments, builds, resource_groups, pipelines`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		time.Sleep(time.Duration(try+1) * 50 * time.Millisecond)
	}
	return err
}

// analyze does what autovacuum does after a bulk load (and what it would not do in time on a
// server where it is off, as on this machine): fresh statistics and visibility map.
func (e *env) analyze(ctx context.Context) error {
	start := time.Now()
	_, err := e.db.Exec(ctx, `VACUUM (ANALYZE) builds, pipelines, build_events`)
	if d := time.Since(start); d > 2*time.Second {
		e.logf("  VACUUM (ANALYZE) took %s", d.Round(100*time.Millisecond))
	}
	return err
}

// bumpQueue sets a new queue version for the in-process jobapi (its key in Redis).
func (e *env) bumpQueue(ctx context.Context) error {
	if e.serverPrefix == "" {
		return nil
	}
	return e.rdb.Set(ctx, e.serverPrefix+"queue:version", "bench-seed-"+randHex(8), time.Minute).Err()
}
