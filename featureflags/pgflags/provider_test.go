package pgflags_test

import (
	"context"
	"crypto/rand"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/open-feature/go-sdk/openfeature"

	"github.com/jobapi/jobapi/featureflags"
	"github.com/jobapi/jobapi/featureflags/pgflags"
	"github.com/jobapi/jobapi/testenv"
)

const flagKey = featureflags.AllowRunnerJobAcknowledgement

// register puts p under a domain of this test's own, never the SDK's global default: the SDK
// is process-wide and tests run in parallel.
func register(t *testing.T, p openfeature.FeatureProvider) (*openfeature.Client, error) {
	t.Helper()
	domain := t.Name() + "-" + rand.Text()
	err := openfeature.SetNamedProviderAndWait(domain, p)
	t.Cleanup(func() { _ = openfeature.SetNamedProviderAndWait(domain, openfeature.NoopProvider{}) })
	return openfeature.NewClient(domain), err
}

// run runs p until the test ends; cleanup waits for Run to return, before the pool closes.
func run(t *testing.T, p *pgflags.Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// replica is one jobapi process's flag stack: its own pool, provider and getters.
func replica(t *testing.T, dbURL string, opts pgflags.Options) (*featureflags.Flags, *openfeature.Client, *pgflags.Provider) {
	t.Helper()
	p := pgflags.New(testPool(t, dbURL), opts)
	client, err := register(t, p)
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	return featureflags.New(client, nil), client, p
}

func TestTwoPhaseCommitSemantics(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	flags, _, p := replica(t, dbURL, pgflags.Options{})
	ctx := context.Background()

	type eval struct {
		project, runner int64
		want            bool
	}
	steps := []struct {
		name   string
		change func() error
		evals  []eval
	}{
		{"never set: off", func() error { return nil },
			[]eval{{1, 1, false}}},
		{"actor project", func() error { _, err := store.SetActor(ctx, flagKey, "project:10", true); return err },
			[]eval{{10, 1, true}, {11, 1, false}, {1, 10, false}}},
		{"actor runner", func() error { _, err := store.SetActor(ctx, flagKey, "runner:20", true); return err },
			[]eval{{10, 1, true}, {11, 20, true}, {20, 1, false}, {11, 21, false}}},
		{"boolean on", func() error { _, err := store.SetBoolean(ctx, flagKey, true); return err },
			[]eval{{1, 1, true}, {99, 98, true}}},
		{"disable clears every gate", func() error { _, err := store.SetBoolean(ctx, flagKey, false); return err },
			[]eval{{1, 1, false}, {10, 1, false}, {11, 20, false}}},
		{"an actor after disable works again", func() error { _, err := store.SetActor(ctx, flagKey, "project:10", true); return err },
			[]eval{{10, 1, true}, {11, 20, false}}},
		{"deleted: off", func() error { return store.Delete(ctx, flagKey) },
			[]eval{{10, 1, false}}},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if err := p.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for _, e := range s.evals {
			if got := flags.TwoPhaseCommit(ctx, e.project, e.runner, "s_1"); got != e.want {
				t.Errorf("%s: TwoPhaseCommit(project %d, runner %d) = %v, want %v", s.name, e.project, e.runner, got, e.want)
			}
		}
	}
	if n := flags.Fallbacks(); n != 0 {
		t.Errorf("Fallbacks() = %d, want 0: a flag never set is off, not a failure", n)
	}
}

func TestPercentageOfProjects(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	flags, _, p := replica(t, dbURL, pgflags.Options{})
	ctx := context.Background()
	if _, err := store.SetPercentage(ctx, flagKey, 25); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	const projects = 10000
	first := make([]bool, projects+1)
	on := 0
	for id := int64(1); id <= projects; id++ {
		// The runner varies: the percentage is of projects, so one project's builds agree.
		first[id] = flags.TwoPhaseCommit(ctx, id, id%7, "s")
		if first[id] {
			on++
		}
	}
	if on < 2350 || on > 2650 {
		t.Errorf("%d of %d projects on at 25%%", on, projects)
	}
	for id := int64(1); id <= projects; id++ {
		if got := flags.TwoPhaseCommit(ctx, id, id%5, "t"); got != first[id] {
			t.Fatalf("project %d: %v, then %v", id, first[id], got)
		}
	}
}

func TestChangeReachesSecondReplicaByNotify(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	// Polling an hour apart: only the NOTIFY can deliver the change in time.
	flags, _, _ := replica(t, dbURL, pgflags.Options{Refresh: time.Hour, Staleness: 2 * time.Hour})
	ctx := context.Background()

	for _, on := range []bool{true, false, true} {
		// Give the listener time to LISTEN before the first change; later ones test that it
		// keeps listening.
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		if _, err := store.SetBoolean(ctx, flagKey, on); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Second, "second replica sees the change", func() bool {
			return flags.TwoPhaseCommit(ctx, 1, 1, "s") == on
		})
		t.Logf("set %v: seen after %s", on, time.Since(start))
	}
}

func TestConfigChangeEvent(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	_, client, _ := replica(t, dbURL, pgflags.Options{Refresh: 20 * time.Millisecond})
	changed := make(chan []string, 10)
	handler := func(d openfeature.EventDetails) { changed <- d.FlagChanges }
	client.AddHandler(openfeature.ProviderConfigChange, &handler)

	if _, err := store.SetActor(context.Background(), flagKey, "project:1", true); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-changed:
		if !slices.Equal(got, []string{flagKey}) {
			t.Errorf("FlagChanges = %v, want [%s]", got, flagKey)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PROVIDER_CONFIGURATION_CHANGED event")
	}
}

func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	ctx := context.Background()
	if _, err := store.SetBoolean(ctx, flagKey, true); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.StartProxy(t, u.Host)
	// The staleness limit is measured from the start of the last good load, which the test
	// pins with a Refresh of its own just before the cut (a later background load only makes
	// the snapshot newer): no bound below depends on how promptly anything runs.
	const staleness, refresh = 2 * time.Second, 50 * time.Millisecond
	flags, client, p := replica(t, px.URL(dbURL), pgflags.Options{
		Refresh: refresh, Staleness: staleness, QueryTimeout: 2 * time.Second})
	if !flags.TwoPhaseCommit(ctx, 1, 1, "s") {
		t.Fatal("flag off while Postgres is reachable")
	}

	loaded := time.Now()
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	px.Stop()
	cut := time.Now()
	// The last snapshot still answers for a while: a blip must not flip builds to legacy.
	earlyFallback := func() {
		if age := time.Since(loaded); age < staleness {
			t.Errorf("flag off %s after the cut, %s after the last good load began: before the %s staleness limit",
				time.Since(cut), age, staleness)
		}
	}
	if !flags.TwoPhaseCommit(ctx, 1, 1, "s") {
		earlyFallback()
	}
	testenv.Eventually(t, staleness+3*time.Second, "default once the snapshot is stale", func() bool {
		if flags.TwoPhaseCommit(ctx, 1, 1, "s") {
			return false
		}
		earlyFallback()
		return true
	})
	if flags.Fallbacks() == 0 {
		t.Error("Fallbacks() = 0 after falling back")
	}
	testenv.Eventually(t, 3*time.Second, "SDK state ERROR", func() bool { return client.State() == openfeature.ErrorState })

	px.Start()
	testenv.Eventually(t, 15*time.Second, "flag back on once Postgres answers", func() bool {
		return flags.TwoPhaseCommit(ctx, 1, 1, "s")
	})
	testenv.Eventually(t, 3*time.Second, "SDK state READY", func() bool { return client.State() == openfeature.ReadyState })
}

func TestPostgresDownAtStartup(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: take a free one and release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable"
	ln.Close()
	pool, err := pgxpool.New(context.Background(), dead) // connects lazily: no error yet
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	p := pgflags.New(pool, pgflags.Options{QueryTimeout: time.Second})
	client, err := register(t, p)
	if err == nil {
		t.Fatal("registering with Postgres down succeeded, want the Init error")
	}
	flags := featureflags.New(client, nil)
	if flags.TwoPhaseCommit(context.Background(), 1, 1, "s") {
		t.Error("TwoPhaseCommit = true with no flags loaded")
	}
	if flags.Fallbacks() != 1 {
		t.Errorf("Fallbacks() = %d, want 1", flags.Fallbacks())
	}
}

func TestNonBooleanEvaluations(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	_, client, p := replica(t, dbURL, pgflags.Options{})
	ctx := context.Background()
	if _, err := store.SetBoolean(ctx, flagKey, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]openfeature.ErrorCode{
		flagKey:   openfeature.TypeMismatchCode,
		"missing": openfeature.FlagNotFoundCode,
	} {
		d, err := client.StringValueDetails(ctx, flag, "dflt", openfeature.EvaluationContext{})
		if err == nil || d.ErrorCode != want || d.Value != "dflt" {
			t.Errorf("String %s = %q, %s, %v; want the default and %s", flag, d.Value, d.ErrorCode, err, want)
		}
		i, err := client.IntValueDetails(ctx, flag, 3, openfeature.EvaluationContext{})
		if err == nil || i.ErrorCode != want || i.Value != 3 {
			t.Errorf("Int %s = %d, %s, %v; want the default and %s", flag, i.Value, i.ErrorCode, err, want)
		}
	}
	if m := openfeature.NamedProviderMetadata(client.Metadata().Domain()); m.Name != "jobapi-postgres" {
		t.Errorf("provider name %q", m.Name)
	}
}

// TestReasonsThroughTheSDK: the reason each stored state resolves with, as the SDK hands it
// on, and what featureflags.Flags makes of it before a claim knows its build's project: a
// flag whose answer cannot depend on the context (on, disabled, no gate left, never set,
// deleted) is decided for every project; one with actor or percentage gates is not.
func TestReasonsThroughTheSDK(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	flags, client, p := replica(t, dbURL, pgflags.Options{})
	ctx := context.Background()
	noop := func() error { return nil }
	steps := []struct {
		name       string
		change     func() error
		wantReason openfeature.Reason // for project 10 and runner 1
		wantValue  bool
		anyProject bool
	}{
		{"never set", noop, openfeature.ErrorReason, false, true},
		{"actor project", func() error { _, err := store.SetActor(ctx, flagKey, "project:10", true); return err },
			openfeature.TargetingMatchReason, true, false},
		{"last actor removed", func() error { _, err := store.SetActor(ctx, flagKey, "project:10", false); return err },
			openfeature.StaticReason, false, true},
		{"boolean on", func() error { _, err := store.SetBoolean(ctx, flagKey, true); return err },
			openfeature.StaticReason, true, true},
		{"disabled", func() error { _, err := store.SetBoolean(ctx, flagKey, false); return err },
			openfeature.DisabledReason, false, true},
		{"percentage", func() error { _, err := store.SetPercentage(ctx, flagKey, 100); return err },
			openfeature.SplitReason, true, false},
		{"percentage removed", func() error { _, err := store.SetPercentage(ctx, flagKey, 0); return err },
			openfeature.StaticReason, false, true},
		{"actor runner", func() error { _, err := store.SetActor(ctx, flagKey, "runner:1", true); return err },
			openfeature.TargetingMatchReason, true, false},
		{"deleted", func() error { return store.Delete(ctx, flagKey) }, openfeature.ErrorReason, false, true},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if err := p.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := client.BooleanValueDetails(ctx, flagKey, false, openfeature.NewEvaluationContext("10",
			map[string]any{featureflags.AttrRunnerID: "1"}))
		if d.Reason != s.wantReason || d.Value != s.wantValue {
			t.Errorf("%s: evaluated %v, reason %s (%v); want %v, %s", s.name, d.Value, d.Reason, err, s.wantValue, s.wantReason)
		}
		if s.wantReason == openfeature.ErrorReason && d.ErrorCode != openfeature.FlagNotFoundCode {
			t.Errorf("%s: error code %s, want FLAG_NOT_FOUND", s.name, d.ErrorCode)
		}
		on, anyProject := flags.TwoPhaseCommitAnyProject(ctx, 2, "s_1")
		if anyProject != s.anyProject || anyProject && on != s.wantValue {
			t.Errorf("%s: TwoPhaseCommitAnyProject = %v, %v; want %v for every project: %v", s.name, on, anyProject, s.wantValue, s.anyProject)
		}
	}
	if n := flags.Fallbacks(); n != 0 {
		t.Errorf("Fallbacks() = %d, want 0", n)
	}
}
