package longpoll

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

type fixedVersion string

func (v fixedVersion) Version(context.Context) (string, error) { return string(v), nil }

type ended struct {
	woken bool
	held  HeldRequest
}

func parkOne(h *Hub, runnerID int64, seen string, max time.Duration) chan ended {
	got := make(chan ended, 2)
	h.Park(runnerID, Profile{Key: "p"}, seen, max, func(woken bool, held HeldRequest) { got <- ended{woken, held} })
	return got
}

func next(t *testing.T, got chan ended) ended {
	t.Helper()
	select {
	case e := <-got:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("the parked request's callback was not called")
		return ended{}
	}
}

func never(t *testing.T, got chan ended) {
	t.Helper()
	select {
	case e := <-got:
		t.Fatalf("callback called again (woken %v): it must be called once", e.woken)
	case <-time.After(50 * time.Millisecond):
	}
}

// A parked request's callback runs once: woken by a change (a bump without a counter wakes
// everyone), at its timeout, or at Release, whichever comes first.
func TestParkCallsBackOnce(t *testing.T) {
	h := NewHub(fixedVersion("v1"), nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.announced("v1", 0)

	woken := parkOne(h, 1, "v1", time.Minute)
	timedOut := parkOne(h, 2, "v1", 20*time.Millisecond)
	if e := next(t, timedOut); e.woken {
		t.Fatal("timed out as woken")
	}
	if h.Held() != 1 {
		t.Fatalf("held %d after one timed out, want 1", h.Held())
	}
	h.announced("v2", 0)
	if e := next(t, woken); !e.woken || e.held.hub == nil {
		t.Fatalf("after a bump: woken %v, held request %v", e.woken, e.held.hub != nil)
	}
	never(t, woken)
	never(t, timedOut)

	// Seen an older version than the newest known: claims at once, on the caller's goroutine.
	missed := parkOne(h, 3, "v1", time.Minute)
	select {
	case e := <-missed:
		if !e.woken {
			t.Fatal("a request that missed a change was not sent to claim")
		}
	default:
		t.Fatal("a request that missed a change was held")
	}

	released := parkOne(h, 4, "v2", time.Minute)
	waited := make(chan bool, 1)
	go func() {
		woken, _ := h.Wait(context.Background(), 5, Profile{Key: "p"}, "v2", time.Minute)
		waited <- woken
	}()
	for h.Held() != 2 {
		time.Sleep(time.Millisecond)
	}
	h.Release()
	if e := next(t, released); e.woken {
		t.Fatal("released as woken")
	}
	if <-waited {
		t.Fatal("Wait released as woken")
	}
	never(t, released)
	if h.Held() != 0 {
		t.Fatalf("held %d after Release", h.Held())
	}
	// Later requests are not held.
	if e := next(t, parkOne(h, 6, "v2", time.Minute)); e.woken {
		t.Fatal("parked after Release and woken")
	}
	if woken, _ := h.Wait(context.Background(), 7, Profile{Key: "p"}, "v2", time.Minute); woken {
		t.Fatal("waited after Release and woken")
	}
}

// Callbacks of parked requests woken together run maxCallbacks at a time; the rest wait
// for a turn, and every one runs.
func TestParkedCallbacksBounded(t *testing.T) {
	h := NewHub(fixedVersion("v1"), nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.announced("v1", 0)
	const n = maxCallbacks + 50
	running, done := make(chan struct{}, n), make(chan struct{}, n)
	unblock := make(chan struct{})
	for i := range n {
		h.Park(int64(i), Profile{Key: "p"}, "v1", time.Minute, func(bool, HeldRequest) {
			running <- struct{}{}
			<-unblock
			done <- struct{}{}
		})
	}
	h.announced("v2", 0) // no counter: wakes everyone
	for range maxCallbacks {
		select {
		case <-running:
		case <-time.After(5 * time.Second):
			t.Fatal("fewer than maxCallbacks callbacks started")
		}
	}
	select {
	case <-running:
		t.Fatal("more than maxCallbacks callbacks ran at once")
	case <-time.After(50 * time.Millisecond):
	}
	close(unblock)
	for i := range n {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d callbacks ran", i, n)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calling != 0 || len(h.calls) != 0 {
		t.Fatalf("after the callbacks: %d running, %d queued", h.calling, len(h.calls))
	}
}
