package runnertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestConcurrentRunnersNoDoubleAssignment: 30 runners over 2 replicas poll 300 pending
// legacy builds at once. Every build must be handed out exactly once.
func TestConcurrentRunnersNoDoubleAssignment(t *testing.T) {
	t.Parallel()
	const runners, builds = 30, 300
	inst := jobapitest.Start(t, jobapitest.Options{})
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{})}

	jobs := make([]jobapitest.Job, builds)
	for i := range jobs {
		jobs[i] = jobapitest.Job{"name": fmt.Sprintf("job-%03d", i), "stage": "test", "script": "x"}
	}
	p := inst.CreatePipeline(t, 1, []string{"test"}, jobs...)
	want := map[int64]bool{}
	for _, j := range p.Jobs {
		want[j.ID] = true
	}

	tokens := make([]string, runners)
	for i := range tokens {
		_, tokens[i] = inst.CreateRunner(t)
	}

	type got struct {
		runner int
		job    api.Job
	}
	var (
		mu       sync.Mutex
		assigned []got
		failures []string
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	begin := make(chan struct{})
	for i := range runners {
		wg.Go(func() {
			base := replicas[i%len(replicas)].URL
			<-begin
			// A runner stops at its first 204: by then every build is assigned or locked by
			// a claim that is committing.
			for ctx.Err() == nil {
				code, b, err := tryRequestJob(ctx, base, tokens[i], fmt.Sprintf("s_%012d", i))
				var j api.Job
				if err == nil && code == http.StatusCreated {
					err = json.Unmarshal(b, &j)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("runner %d: %v", i, err))
					mu.Unlock()
					return
				}
				switch code {
				case http.StatusCreated:
					mu.Lock()
					assigned = append(assigned, got{i, j})
					mu.Unlock()
					continue
				case http.StatusNoContent:
					return
				case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
					continue // "ask again"
				default:
					mu.Lock()
					failures = append(failures, fmt.Sprintf("runner %d: %d %.200s", i, code, b))
					mu.Unlock()
					return
				}
			}
		})
	}
	close(begin)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("runners did not finish in time")
	}
	for _, f := range failures {
		t.Error(f)
	}

	seen := map[int64]int{}
	tokensSeen := map[string]bool{}
	for _, a := range assigned {
		if seen[a.job.ID] != 0 {
			t.Errorf("build %d handed out twice (runners %d and %d)", a.job.ID, seen[a.job.ID]-1, a.runner)
		}
		seen[a.job.ID] = a.runner + 1
		if !want[a.job.ID] {
			t.Errorf("runner %d got unknown build %d", a.runner, a.job.ID)
		}
		if tokensSeen[a.job.Token] {
			t.Errorf("job token reused for build %d", a.job.ID)
		}
		tokensSeen[a.job.Token] = true
	}
	if len(assigned) != builds || len(seen) != builds {
		t.Errorf("%d assignments of %d distinct builds, want %d", len(assigned), len(seen), builds)
	}

	// The database agrees: every build running, assigned exactly once, to the runner that
	// got it, by the manager that asked.
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM builds WHERE status = 'running'`); n != builds {
		t.Errorf("%d running builds, want %d", n, builds)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM (SELECT build_id FROM build_events WHERE type = 'assigned'
		GROUP BY build_id HAVING count(*) <> 1) x`); n != 0 {
		t.Errorf("%d builds with other than one assigned event", n)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM build_events WHERE type = 'assigned'`); n != builds {
		t.Errorf("%d assigned events, want %d", n, builds)
	}
	rows, err := inst.Pool.Query(context.Background(),
		`SELECT b.id, m.system_id FROM builds b JOIN runner_managers m ON m.id = b.runner_manager_id`)
	if err != nil {
		t.Fatal(err)
	}
	managers := map[int64]string{}
	for rows.Next() {
		var id int64
		var sys string
		if err := rows.Scan(&id, &sys); err != nil {
			t.Fatal(err)
		}
		managers[id] = sys
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, a := range assigned {
		if sys := managers[a.job.ID]; sys != fmt.Sprintf("s_%012d", a.runner) {
			t.Errorf("build %d recorded for manager %q, but runner %d got it", a.job.ID, sys, a.runner)
		}
	}
	// Nothing is left for anyone.
	jobapitest.WantNoJob(t, replicas[1].URL, tokens[0])
	if st := inst.Pipeline(t, p).Status; st != "running" {
		t.Errorf("pipeline %s, want running", st)
	}
}

// tryRequestJob is requestJob for goroutines other than the test's: errors are returned.
func tryRequestJob(ctx context.Context, base, token, systemID string) (int, []byte, error) {
	body, _ := json.Marshal(map[string]any{"token": token, "system_id": systemID, "info": jobapitest.RunnerInfo()})
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/v4/jobs/request", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := jobapitest.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
