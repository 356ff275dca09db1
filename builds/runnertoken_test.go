package builds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/secrettoken"
)

// tokenStore finds one runner by its token hash and counts the lookups; verify's manager
// upsert always succeeds. Anything else panics on the nil embedded Store.
type tokenStore struct {
	Store
	hash    []byte
	runner  Runner
	lookups int
}

func (s *tokenStore) RunnerByTokenHash(_ context.Context, hash []byte) (Runner, error) {
	s.lookups++
	if string(hash) != string(s.hash) {
		return Runner{}, ErrNotFound
	}
	return s.runner, nil
}

func (s *tokenStore) UpsertManager(_ context.Context, runnerID int64, systemID string, _ ManagerInfo, now time.Time, _ int) (Manager, error) {
	return Manager{ID: 1, RunnerID: runnerID, SystemID: systemID, ContactedAt: now}, nil
}

// An expired token is refused on every request, also while this replica still has the
// runner cached from a lookup made before the expiry.
func TestExpiredRunnerTokenRefusedFromCache(t *testing.T) {
	const token = "glrt-expiring-token-0123456789"
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	expires := now.Add(time.Minute)
	store := &tokenStore{hash: secrettoken.Hash(token), runner: Runner{ID: 4, RunUntagged: true, TokenExpiresAt: &expires}}
	d := unitDeps(store)
	d.Now, d.Config, d.Log = func() time.Time { return now }, Config{RunnerCacheTTL: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(d)
	ctx := context.Background()

	r, err := svc.VerifyRunner(ctx, token, "s_1", ManagerInfo{})
	if err != nil || r.TokenExpiresAt == nil || !r.TokenExpiresAt.Equal(expires) {
		t.Fatalf("verify before the expiry: %+v, %v", r, err)
	}
	now = expires.Add(-time.Nanosecond)
	if _, err := svc.VerifyRunner(ctx, token, "s_1", ManagerInfo{}); err != nil {
		t.Fatalf("verify just before the expiry: %v", err)
	}
	now = expires
	if _, err := svc.VerifyRunner(ctx, token, "s_1", ManagerInfo{}); !errors.Is(err, ErrRunnerForbidden) {
		t.Fatalf("verify at the expiry: %v, want ErrRunnerForbidden", err)
	}
	// An idle poll (it echoes the queue version) is answered from the cache for longest.
	if _, err := svc.RequestJob(ctx, JobRequest{Token: token, LastUpdate: "v1"}); !errors.Is(err, ErrRunnerForbidden) {
		t.Fatalf("idle job request at the expiry: %v, want ErrRunnerForbidden", err)
	}
	if store.lookups != 1 {
		t.Errorf("%d lookups, want 1: the cached runner answered, and its expiry refused", store.lookups)
	}
}

// Tokens carry the configured lifetime in whole seconds, and the prefix of how the runner
// was registered.
func TestNewRunnerToken(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 700_000_000, time.UTC)
	for _, tc := range []struct {
		expiresIn    time.Duration
		registration bool
		prefix       string
		expires      *time.Time
	}{
		{0, false, RunnerTokenPrefix, nil},
		{0, true, RegisteredRunnerTokenPrefix, nil},
		{2 * time.Hour, false, RunnerTokenPrefix, ptr(time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC))},
	} {
		d := unitDeps(&tokenStore{})
		d.Now, d.Config = func() time.Time { return now }, Config{RunnerTokenExpiresIn: tc.expiresIn}
		svc := NewService(d)
		got := svc.NewRunnerToken(Runner{RegistrationToken: tc.registration})
		if !strings.HasPrefix(got.Token, tc.prefix) || len(got.Token) != len(tc.prefix)+32 {
			t.Errorf("token %q, want %s and 32 characters", got.Token, tc.prefix)
		}
		if (got.ExpiresAt == nil) != (tc.expires == nil) || got.ExpiresAt != nil && !got.ExpiresAt.Equal(*tc.expires) {
			t.Errorf("expires in %v: at %v, want %v", tc.expiresIn, got.ExpiresAt, tc.expires)
		}
	}
	// gitlab-runner tells the two kinds apart by this prefix alone.
	if strings.HasPrefix(RegisteredRunnerTokenPrefix+"x", RunnerTokenPrefix) {
		t.Error("a glrtr- token must not start with glrt-")
	}
}

func ptr[T any](v T) *T { return &v }

// fixedQueue is a queue version that never changes.
type fixedQueue string

func (q fixedQueue) Version(context.Context) (string, error) { return string(q), nil }
func (fixedQueue) Bump(context.Context) error                { return nil }

// Deleting a runner ends each build it holds along a declared transition; the retry
// policy applies as for any failure, and a build never acknowledged also has the
// provisioning budget, as a decline.
func TestRunnerDeletionFinish(t *testing.T) {
	d := RunnerDeletion{RunnerID: 3, Actor: "operator", Now: time.Now(), Policy: DefaultRetryPolicy(2)}
	for _, tc := range []struct {
		from          Status
		to            Status
		rule          RetryRule
		retried       bool
		provisionings bool
	}{
		{from: StatusWaiting, to: StatusFailed, retried: true, provisionings: true},
		{from: StatusRunning, to: StatusFailed, retried: false},
		{from: StatusRunning, to: StatusFailed, rule: RetryRule{Max: 1, When: []string{ReasonRunnerSystemFailure}}, retried: true},
		{from: StatusRunning, to: StatusFailed, rule: RetryRule{Max: 1, When: []string{ReasonScriptFailure}}, retried: false},
		{from: StatusCanceling, to: StatusCanceled},
	} {
		f := d.Finish(HeldBuild{ID: 8, Status: tc.from, SystemID: "s_x"})
		if err := f.Check(); err != nil {
			t.Errorf("%s: %v", tc.from, err)
		}
		if f.To != tc.to || f.Event != EventRunnerDeleted || f.RunnerManager != "s_x" {
			t.Errorf("%s: %+v", tc.from, f)
		}
		b := Build{ID: 8, Status: f.To, Attempt: 1, Payload: Payload{Retry: tc.rule}}
		if got := DecideAutoRetry(f, b).Retry; got != tc.retried {
			t.Errorf("%s with retry %+v: retried %v, want %v", tc.from, tc.rule, got, tc.retried)
		}
		if (f.AlsoRetryAs == ReasonRunnerProvisioningTimeout) != tc.provisionings {
			t.Errorf("%s: AlsoRetryAs %q", tc.from, f.AlsoRetryAs)
		}
	}
}
