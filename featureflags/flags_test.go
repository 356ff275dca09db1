package featureflags_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/featureflags"
	"github.com/open-feature/go-sdk/openfeature"
)

// fakeProvider answers every boolean with a fixed detail and records the last context: it
// injects the faults a real provider cannot produce on demand.
type fakeProvider struct {
	openfeature.NoopProvider
	detail openfeature.BoolResolutionDetail

	mu   sync.Mutex
	last openfeature.FlattenedContext
}

func (p *fakeProvider) Metadata() openfeature.Metadata { return openfeature.Metadata{Name: "fake"} }

func (p *fakeProvider) BooleanEvaluation(_ context.Context, _ string, _ bool, flatCtx openfeature.FlattenedContext) openfeature.BoolResolutionDetail {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = flatCtx
	return p.detail
}

// newFlags registers p under a domain of this test's own: the SDK is process-global and
// tests run in parallel.
func newFlags(t *testing.T, p openfeature.FeatureProvider, logger *slog.Logger) *featureflags.Flags {
	t.Helper()
	domain := t.Name() + "-" + rand.Text()
	if err := openfeature.SetNamedProviderAndWait(domain, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = openfeature.SetNamedProviderAndWait(domain, openfeature.NoopProvider{}) })
	return featureflags.New(openfeature.NewClient(domain), logger)
}

func TestTwoPhaseCommitPassesContext(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{detail: openfeature.BoolResolutionDetail{Value: true}}
	flags := newFlags(t, p, nil)

	if !flags.TwoPhaseCommit(context.Background(), 42, 7, "s_abc") {
		t.Fatal("TwoPhaseCommit = false, want the provider's true")
	}
	p.mu.Lock()
	got := p.last
	p.mu.Unlock()
	want := map[string]string{
		openfeature.TargetingKey:               "42",
		featureflags.AttrRunnerID:              "7",
		featureflags.AttrRunnerManagerSystemID: "s_abc",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("context[%q] = %v, want %q", k, got[k], v)
		}
	}
	if c := flags.Counts(featureflags.AllowRunnerJobAcknowledgement); c != (featureflags.Counts{On: 1}) {
		t.Errorf("Counts = %+v, want one on: the key must be listed in Keys", c)
	}
}

func TestFallbacks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		detail       openfeature.BoolResolutionDetail
		wantFallback bool
	}{
		{"general error", openfeature.BoolResolutionDetail{Value: true, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewGeneralResolutionError("postgres unreachable")}}, true},
		{"not ready", openfeature.BoolResolutionDetail{ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewProviderNotReadyResolutionError("loading")}}, true},
		// A flag nobody set is off, not an outage.
		{"flag not found", openfeature.BoolResolutionDetail{ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewFlagNotFoundResolutionError("no such flag")}}, false},
		{"off", openfeature.BoolResolutionDetail{Value: false}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			flags := newFlags(t, &fakeProvider{detail: tt.detail}, logger)

			const n = 100
			for range n {
				if flags.TwoPhaseCommit(context.Background(), 1, 2, "s") {
					t.Fatal("TwoPhaseCommit = true, want false (the default)")
				}
			}
			wantFallbacks := uint64(0)
			if tt.wantFallback {
				wantFallbacks = n
			}
			if got := flags.Fallbacks(); got != wantFallbacks {
				t.Errorf("Fallbacks() = %d, want %d", got, wantFallbacks)
			}
			mu.Lock()
			warnings := strings.Count(logs.String(), "level=WARN")
			mu.Unlock()
			wantWarnings := 0
			if tt.wantFallback {
				wantWarnings = 1 // rate-limited: not one per evaluation
			}
			if warnings != wantWarnings {
				t.Errorf("%d warnings logged, want %d:\n%s", warnings, wantWarnings, logs.String())
			}
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestTwoPhaseCommitAnyProject: only an answer the provider gave without looking at the
// context (STATIC, DISABLED, or no such flag) is taken for every project; targeting, a
// split, DEFAULT (targeting that matched nothing) and failures leave the decision to the
// per-candidate evaluation. It counts and logs nothing itself; CountTwoPhaseCommit counts.
func TestTwoPhaseCommitAnyProject(t *testing.T) {
	t.Parallel()
	detail := func(v bool, r openfeature.Reason) openfeature.BoolResolutionDetail {
		return openfeature.BoolResolutionDetail{Value: v, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{Reason: r}}
	}
	tests := []struct {
		name           string
		detail         openfeature.BoolResolutionDetail
		wantOn, wantOK bool
	}{
		{"static on", detail(true, openfeature.StaticReason), true, true},
		{"static off", detail(false, openfeature.StaticReason), false, true},
		{"disabled", detail(false, openfeature.DisabledReason), false, true},
		{"flag not found", openfeature.BoolResolutionDetail{ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewFlagNotFoundResolutionError("no such flag")}}, false, true},
		{"targeting match", detail(true, openfeature.TargetingMatchReason), false, false},
		{"split", detail(true, openfeature.SplitReason), false, false},
		{"default: targeting matched nothing", detail(false, openfeature.DefaultReason), false, false},
		{"no reason", detail(true, ""), false, false},
		{"cached", detail(true, openfeature.CachedReason), false, false},
		{"general error", openfeature.BoolResolutionDetail{Value: true, ProviderResolutionDetail: openfeature.ProviderResolutionDetail{
			ResolutionError: openfeature.NewGeneralResolutionError("postgres unreachable"), Reason: openfeature.StaticReason}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			var mu sync.Mutex
			p := &fakeProvider{detail: tt.detail}
			flags := newFlags(t, p, slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil)))
			on, ok := flags.TwoPhaseCommitAnyProject(context.Background(), 7, "s_abc")
			if on != tt.wantOn || ok != tt.wantOK {
				t.Errorf("TwoPhaseCommitAnyProject = %v, %v; want %v, %v", on, ok, tt.wantOn, tt.wantOK)
			}
			p.mu.Lock()
			got := p.last
			p.mu.Unlock()
			if _, has := got[openfeature.TargetingKey]; has || got[featureflags.AttrRunnerID] != "7" ||
				got[featureflags.AttrRunnerManagerSystemID] != "s_abc" {
				t.Errorf("context %v, want the runner's attributes and no targeting key", got)
			}
			c := featureflags.AllowRunnerJobAcknowledgement
			if n := flags.Counts(c); n != (featureflags.Counts{}) {
				t.Errorf("Counts = %+v after it, want none", n)
			}
			mu.Lock()
			if logs.Len() != 0 {
				t.Errorf("logged %q, want nothing", logs.String())
			}
			mu.Unlock()
			flags.CountTwoPhaseCommit(true)
			flags.CountTwoPhaseCommit(false)
			flags.CountTwoPhaseCommit(false)
			if n := flags.Counts(c); n != (featureflags.Counts{On: 1, Off: 2}) {
				t.Errorf("Counts = %+v after CountTwoPhaseCommit on, off, off", n)
			}
		})
	}
}
