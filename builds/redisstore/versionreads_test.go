package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
)

// scriptedReads is a version read that blocks each call until the test releases it, and
// answers "v<n>" for the n-th call.
type scriptedReads struct {
	mu      sync.Mutex
	calls   int
	release chan struct{}
}

func (s *scriptedReads) read(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	select {
	case <-s.release:
		return fmt.Sprintf("v%d", n), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// TestVersionReadsShareTheReadAfterTheirs: callers that come while a read is in flight all
// take the one read that starts after it, never the one in flight (it may have read the
// version before they came); a caller that finds no read in flight reads alone.
func TestVersionReadsShareTheReadAfterTheirs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scriptedReads{release: make(chan struct{})}
		r := &versionReads{read: s.read}
		ctx := context.Background()
		first := make(chan string, 1)
		go func() {
			v, _ := r.get(ctx)
			first <- v
		}()
		synctest.Wait() // the first read is in flight
		const followers = 100
		got := make(chan string, followers)
		for range followers {
			go func() {
				v, err := r.get(ctx)
				if err != nil {
					t.Errorf("follower: %v", err)
				}
				got <- v
			}()
		}
		synctest.Wait() // every follower waits
		close(s.release)
		if v := <-first; v != "v1" {
			t.Errorf("first caller got %q, want v1", v)
		}
		for range followers {
			if v := <-got; v != "v2" {
				t.Errorf("a caller that came during the first read got %q, want v2 (the read after it)", v)
			}
		}
		synctest.Wait()
		if s.calls != 2 {
			t.Errorf("%d reads for %d callers, want 2", s.calls, followers+1)
		}
		if v, _ := r.get(ctx); v != "v3" {
			t.Errorf("a caller after them got %q, want its own read v3", v)
		}
	})
}

// TestVersionReadsCallerGone: a caller whose request ends stops waiting, and neither its
// end nor the first caller's fails the read the others share.
func TestVersionReadsCallerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scriptedReads{release: make(chan struct{})}
		r := &versionReads{read: s.read}
		firstCtx, cancelFirst := context.WithCancel(context.Background())
		firstErr := make(chan error, 1)
		go func() {
			_, err := r.get(firstCtx)
			firstErr <- err
		}()
		synctest.Wait()
		goneCtx, cancelGone := context.WithCancel(context.Background())
		goneErr := make(chan error, 1)
		go func() {
			_, err := r.get(goneCtx)
			goneErr <- err
		}()
		stays := make(chan string, 1)
		go func() {
			v, err := r.get(context.Background())
			if err != nil {
				t.Errorf("the caller that stayed: %v", err)
			}
			stays <- v
		}()
		synctest.Wait()
		cancelGone()
		if err := <-goneErr; !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that went away got %v, want its context's error", err)
		}
		cancelFirst() // the first read fails, and the shared one starts after it
		if err := <-firstErr; !errors.Is(err, context.Canceled) {
			t.Errorf("first caller got %v, want its context's error", err)
		}
		synctest.Wait()
		close(s.release)
		if v := <-stays; v != "v2" {
			t.Errorf("the caller that stayed got %q, want v2", v)
		}
	})
}
