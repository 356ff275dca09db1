// Package faulttest_test breaks jobapi's backends on purpose and checks that nothing is lost:
// real replicas (jobapitest, and a `jobapi serve` subprocess that is SIGKILLed) on a real
// Postgres, a real Redis that restarts into LOADING, and a real 3-master Redis Cluster.
// SPEC §2, §9 and the §11 invariants. Each test logs what its fault cost (answers by status,
// time to recover), measured.
package faulttest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/builds/redisstore"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/localserver"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startCluster starts a 3-master Redis Cluster for this test alone.
func startCluster(t *testing.T) *localserver.RedisCluster {
	t.Helper()
	log := &testenv.Buffer{}
	c, err := localserver.StartRedisCluster(context.Background(), "", log, 3)
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop redis cluster: %v", err)
		}
		if t.Failed() {
			t.Logf("redis cluster log:\n%s", log)
		}
	})
	return c
}

// onCluster points a replica at the cluster instead of the shared single Redis.
func onCluster(c *localserver.RedisCluster, more func(*server.Config)) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.RedisClusterAddrs = c.Addrs
		cfg.RedisURL = ""
		if more != nil {
			more(cfg)
		}
	}
}

// leasesOf is the ack-key store of a replica, for tests that grant keys themselves.
func leasesOf(inst *jobapitest.Instance) *redisstore.Store {
	return redisstore.New(inst.Redis, inst.Config.RedisKeyPrefix)
}

// makeWaiting creates n pending builds in pipelines of perPipeline jobs (project 1) and
// assigns each two-phase through the store, as RequestJob does: the row waits in Postgres
// with a deadline of record ttl from now, and its ack key is granted for ttl. Eight workers
// claim in parallel (SKIP LOCKED hands them different rows).
func makeWaiting(t *testing.T, inst *jobapitest.Instance, n, perPipeline int, ttl time.Duration) []int64 {
	t.Helper()
	ctx := context.Background()
	store := pgstore.New(inst.Pool)
	leases := leasesOf(inst)
	for left := n; left > 0; left -= perPipeline {
		jobs := make([]builds.JobDefinition, min(left, perPipeline))
		for i := range jobs {
			jobs[i] = builds.JobDefinition{Name: "job" + strconv.Itoa(i), Stage: "test", Script: []string{"true"}}
		}
		d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"}, Jobs: jobs}
		if err := d.Normalize(); err != nil {
			t.Fatal(err)
		}
		if _, err := store.CreatePipeline(ctx, d, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	r, err := store.CreateRunner(ctx, builds.Runner{RunUntagged: true}, secrettoken.Hash(secrettoken.New(builds.RunnerTokenPrefix)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := store.UpsertManager(ctx, r.ID, "s_fault", builds.ManagerInfo{}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		ids []int64
		wg  sync.WaitGroup
	)
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for {
				now := time.Now()
				b, err := store.Claim(ctx, builds.Claim{Runner: r, ManagerID: m.ID, SystemID: "s_fault",
					TokenHash: secrettoken.Hash(secrettoken.New(builds.JobTokenPrefix)), Now: now,
					AckDeadline: now.Add(ttl), TwoPhase: func(int64) bool { return true }})
				if errors.Is(err, builds.ErrNoBuild) {
					return
				}
				if err == nil {
					err = leases.Grant(ctx, b.ID, strconv.FormatInt(m.ID, 10), ttl)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids = append(ids, b.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("assign: %v", err)
	}
	if len(ids) != n {
		t.Fatalf("assigned %d builds, want %d", len(ids), n)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// fillForLoading saves a dataset to r's dump file, so that the next restart LOADs it: 20,000
// keys of 1.1 KB, enough for RestartLoading to hold the server LOADING for over three minutes.
func fillForLoading(t *testing.T, r *localserver.Redis) {
	t.Helper()
	if err := r.FillForLoading(context.Background(), 20_000, 1100); err != nil {
		t.Fatal(err)
	}
}

// codes counts HTTP answers by endpoint and status; 0 is "no response".
type codes struct {
	mu sync.Mutex
	n  map[string]map[int]int
	// noRetryAfter counts 503 and 429 answers without a Retry-After header.
	noRetryAfter int
	// slowest is the longest any answer took.
	slowest time.Duration
}

func (c *codes) add(endpoint string, code int, h http.Header, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slowest = max(c.slowest, took)
	if c.n == nil {
		c.n = map[string]map[int]int{}
	}
	if c.n[endpoint] == nil {
		c.n[endpoint] = map[int]int{}
	}
	c.n[endpoint][code]++
	if (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests) && h.Get("Retry-After") == "" {
		c.noRetryAfter++
	}
}

func (c *codes) get(endpoint string, code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[endpoint][code]
}

// total counts code across endpoints.
func (c *codes) total(code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.n {
		n += m[code]
	}
	return n
}

func (c *codes) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eps []string
	for ep := range c.n {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	var b strings.Builder
	for _, ep := range eps {
		var cs []int
		for code := range c.n[ep] {
			cs = append(cs, code)
		}
		sort.Ints(cs)
		fmt.Fprintf(&b, "%s:", ep)
		for _, code := range cs {
			fmt.Fprintf(&b, " %d×%d", code, c.n[ep][code])
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "slowest answer %v", c.slowest.Round(time.Millisecond))
	return b.String()
}

// noServerErrors fails the test on any 500, on a 403 to /jobs/request, and on a 503 or
// 429 without Retry-After: the answers SPEC §9 rules out under faults.
func (c *codes) noServerErrors(t *testing.T) {
	t.Helper()
	if n := c.total(http.StatusInternalServerError); n > 0 {
		t.Errorf("%d answers were 500 (%s)", n, c)
	}
	if n := c.get(epRequest, http.StatusForbidden); n > 0 {
		t.Errorf("%d job requests were answered 403: gitlab-runner stops polling after three (%s)", n, c)
	}
	if c.noRetryAfter > 0 {
		t.Errorf("%d answers 503/429 without Retry-After", c.noRetryAfter)
	}
}

const (
	epRequest   = "request"
	epAck       = "ack"
	epKeepalive = "keepalive"
	epFinish    = "finish"
	epLateAck   = "late-ack"
)

// probe asks for readiness during faults: a replica that cannot answer within 3 s is not ready.
var probe = &http.Client{Timeout: 3 * time.Second}

// ready reports whether the replica at baseURL answers its readiness check with 200.
func ready(baseURL string) bool {
	resp, err := probe.Get(baseURL + "/-/readiness")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
