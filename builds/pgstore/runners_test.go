package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// A runner's own reset keeps the presented token for its grace (never past its expiry); a
// reset with that previous token replaces the current one, which the runner never got; an
// expired or replaced token resets nothing; an operator's reset revokes every token.
func TestRotateRunnerToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.Pool(t))
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	hash := func(name string) []byte { return secrettoken.Hash("glrt-" + name + "-0123456789abcdef") }
	expiresAt := func(name string) (*time.Time, error) {
		t.Helper()
		r, err := s.RunnerByTokenHash(ctx, hash(name))
		return r.TokenExpiresAt, err
	}
	same := func(a, b *time.Time) bool { return a == nil && b == nil || a != nil && b != nil && a.Equal(*b) }

	r, err := s.CreateRunner(ctx, builds.Runner{RunUntagged: true, RegistrationToken: true, TokenExpiresAt: at(time.Hour)}, hash("a"))
	if err != nil || !r.RegistrationToken || !same(r.TokenExpiresAt, at(time.Hour)) {
		t.Fatalf("create: %+v %v", r, err)
	}
	// a → b; a stays for 10 minutes.
	rot := builds.TokenRotation{RunnerID: r.ID, Presented: hash("a"), New: hash("b"), ExpiresAt: at(2 * time.Hour),
		PreviousUntil: at(10 * time.Minute), Now: now}
	if err := s.RotateRunnerToken(ctx, rot); err != nil {
		t.Fatal(err)
	}
	if got, err := expiresAt("a"); err != nil || !same(got, at(10*time.Minute)) {
		t.Errorf("previous token a expires %v (%v), want in 10 minutes", got, err)
	}
	if got, err := expiresAt("b"); err != nil || !same(got, at(2*time.Hour)) {
		t.Errorf("current token b expires %v (%v), want in 2 hours", got, err)
	}
	// The answer with b was lost: the runner resets with a again and gets c; b is dropped,
	// a keeps its deadline.
	rot.New, rot.Now, rot.PreviousUntil = hash("c"), now.Add(time.Minute), at(11*time.Minute)
	if err := s.RotateRunnerToken(ctx, rot); err != nil {
		t.Fatal(err)
	}
	if _, err := expiresAt("b"); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("b after the reset with a: %v, want ErrNotFound", err)
	}
	if got, _ := expiresAt("a"); !same(got, at(10*time.Minute)) {
		t.Errorf("a expires %v after the second reset, want unchanged", got)
	}
	// Past a's grace, a resets nothing.
	rot.New, rot.Now = hash("d"), now.Add(10*time.Minute)
	if err := s.RotateRunnerToken(ctx, rot); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("reset with a past its grace: %v, want ErrNotFound", err)
	}
	// c → e with a grace longer than c's own life left: c keeps only its own expiry, and
	// a is gone.
	if err := s.RotateRunnerToken(ctx, builds.TokenRotation{RunnerID: r.ID, Presented: hash("c"), New: hash("e"),
		ExpiresAt: at(3 * time.Hour), PreviousUntil: at(5 * time.Hour), Now: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := expiresAt("c"); !same(got, at(2*time.Hour)) {
		t.Errorf("c expires %v, want its own expiry (2 hours)", got)
	}
	if _, err := expiresAt("a"); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("a after c's reset: %v, want ErrNotFound", err)
	}
	// Without a grace the presented token stops at once.
	if err := s.RotateRunnerToken(ctx, builds.TokenRotation{RunnerID: r.ID, Presented: hash("e"), New: hash("f"),
		Now: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := expiresAt("e"); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("e after a reset without grace: %v, want ErrNotFound", err)
	}
	if got, err := expiresAt("f"); err != nil || got != nil {
		t.Errorf("f expires %v (%v), want never", got, err)
	}
	// An operator's reset revokes: only the new token works.
	if err := s.RotateRunnerToken(ctx, builds.TokenRotation{RunnerID: r.ID, Presented: hash("f"), New: hash("g"),
		PreviousUntil: at(2 * time.Hour), Now: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRunnerToken(ctx, r.ID, hash("h"), nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f", "g"} {
		if _, err := expiresAt(name); !errors.Is(err, builds.ErrNotFound) {
			t.Errorf("%s after the operator's reset: %v, want ErrNotFound", name, err)
		}
	}
	if got, err := s.RunnerByTokenHash(ctx, hash("h")); err != nil || got.ID != r.ID || !got.RegistrationToken {
		t.Errorf("h: %+v %v", got, err)
	}
}
