package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/secrettoken"
)

// runner is one registered runner with a client playing its wire protocol.
type runner struct {
	*runnerclient.Client
	ID        int64
	ManagerID int64
}

// newRunners registers n runners through the operator API and verifies each, as
// `gitlab-runner register` would, so that each has a runner manager row.
func (e *env) newRunners(ctx context.Context, n int, tags []string) ([]*runner, error) {
	if tags == nil {
		tags = []string{}
	}
	out := make([]*runner, n)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for w := 0; w < min(n, 16); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := e.newRunner(ctx, i, tags)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				out[i] = r
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	// Scenarios play these runners with fresh clients; the registration connections would
	// otherwise sit idle on both sides and count in the peak RSS.
	closeIdle(out)
	return out, nil
}

func (e *env) newRunner(ctx context.Context, i int, tags []string) (*runner, error) {
	var created struct {
		ID    int64  `json:"id"`
		Token string `json:"token"`
	}
	if err := e.admin(ctx, http.MethodPost, "/api/v4/user/runners", map[string]any{
		"description": fmt.Sprintf("bench runner %d", i), "tag_list": tags, "run_untagged": len(tags) == 0,
	}, &created); err != nil {
		return nil, err
	}
	c := runnerclient.New(e.baseURL, created.Token, "s_"+randHex(6))
	if _, err := c.Verify(ctx); err != nil {
		return nil, err
	}
	// One connection per runner would stay open on both ends: thousands of descriptors.
	c.CloseIdleConnections()
	r := &runner{Client: c, ID: created.ID}
	err := e.db.QueryRow(ctx, `SELECT id FROM runner_managers WHERE runner_id = $1 AND system_id = $2`,
		created.ID, c.SystemID).Scan(&r.ManagerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("runner %d verified but has no manager row: is --database-url jobapi's database?", created.ID)
	}
	return r, err
}

// fresh returns clients for the same runners with no remembered last_update and new
// connections, as runners that just started; with the in-process jobapi, their calls are
// tagged so that each one's Postgres statements are counted.
func (e *env) fresh(rs []*runner) []*runner {
	out := make([]*runner, len(rs))
	for i, r := range rs {
		c := runnerclient.New(r.BaseURL, r.Token, r.SystemID)
		if e.queries != nil {
			c.HTTP.Transport = &taggingTransport{base: c.HTTP.Transport, q: e.queries}
		}
		out[i] = &runner{Client: c, ID: r.ID, ManagerID: r.ManagerID}
	}
	return out
}

func closeIdle(rs []*runner) {
	for _, r := range rs {
		r.CloseIdleConnections()
	}
}

// newFleet creates n untagged runners straight through jobapi's store, 16 at a time, for
// the pickup fleet: registering 10,000 over the operator API and verifying each took
// minutes on a loaded 2-core machine (20,000 requests). They have no manager row yet: the
// fleet's warm-up request, which every runner sends before the clock starts, records it.
func (e *env) newFleet(ctx context.Context, n int) ([]*runner, error) {
	fleet, err := e.newFleetRunners(ctx, n)
	out := make([]*runner, len(fleet))
	for i, f := range fleet {
		out[i] = &runner{Client: runnerclient.New(e.baseURL, f.Token, f.SystemID), ID: f.ID}
	}
	return out, err
}

// newFleetRunners is newFleet without a client per runner (which holds an HTTP transport
// of its own): what the fleet process needs, for scenarios that measure this process's
// memory.
func (e *env) newFleetRunners(ctx context.Context, n int) ([]fleetRunner, error) {
	store := pgstore.New(e.db)
	out := make([]fleetRunner, n)
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	loadgen(ctx, min(n, 16), func(ctx context.Context, _ int) {
		for {
			i := int(next.Add(1)) - 1
			if i >= n || ctx.Err() != nil {
				return
			}
			token := secrettoken.New(builds.RunnerTokenPrefix)
			r, err := store.CreateRunner(ctx, builds.Runner{Description: fmt.Sprintf("bench fleet runner %d", i), RunUntagged: true},
				secrettoken.Hash(token))
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
				return
			}
			out[i] = fleetRunner{Token: token, SystemID: "s_" + randHex(6), ID: r.ID}
		}
	})
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}
