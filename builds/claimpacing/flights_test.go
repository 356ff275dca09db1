package claimpacing

import (
	"context"
	"sync"
	"testing"
	"time"
)

// enterAll has n requests enter profile p's flight at version v while the slot holder
// first waits for them all to queue, then reports outcome; it returns what the first
// answered waiters got (the rest wait on).
func enterAll(t *testing.T, f *Flights, v string, n, answered int, first *FlightSlot, outcome FlightOutcome) (slots []*FlightSlot, empties, alone int) {
	t.Helper()
	type got struct {
		slot  *FlightSlot
		empty bool
		err   error
	}
	results := make(chan got, n)
	for range n {
		go func() {
			s, e, err := f.Enter(context.Background(), "p", v)
			results <- got{s, e, err}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		queued := len(f.by["p"].waiting)
		f.mu.Unlock()
		if queued == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests wait for the claim in flight", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
	first.Done(outcome)
	timeout := time.After(5 * time.Second)
	for range answered {
		select {
		case r := <-results:
			switch {
			case r.err != nil:
				t.Fatal(r.err)
			case r.empty:
				empties++
			case r.slot != nil:
				slots = append(slots, r.slot)
			default:
				alone++
			}
		case <-timeout:
			t.Fatal("a waiter was never answered")
		}
	}
	return slots, empties, alone
}

func TestClaimFlights(t *testing.T) {
	f := NewFlights()
	ctx := context.Background()
	lead, empty, err := f.Enter(ctx, "p", "v1")
	if err != nil || empty || lead == nil {
		t.Fatalf("first claim: slot %v, empty %v, err %v; want a slot", lead, empty, err)
	}

	// It finds nothing: everyone waiting is answered 204, and so is a later request.
	if slots, empties, alone := enterAll(t, f, "v1", 10, 10, lead, FlightNothing); len(slots) != 0 || empties != 10 || alone != 0 {
		t.Fatalf("after nothing: %d slots, %d 204s, %d alone; want 10 × 204", len(slots), empties, alone)
	}
	if _, empty, _ := f.Enter(ctx, "p", "v1"); !empty {
		t.Fatal("a request after the empty claim at v1 was not answered 204")
	}

	// A new version: one claim again; it takes a build, so the two oldest waiters claim next.
	lead, _, _ = f.Enter(ctx, "p", "v2")
	if lead == nil {
		t.Fatal("no slot at a new version")
	}
	slots, empties, alone := enterAll(t, f, "v2", 5, 2, lead, FlightFound)
	if len(slots) != 2 || empties != 0 || alone != 0 {
		t.Fatalf("after found: %d slots, %d 204s, %d alone; want 2 slots", len(slots), empties, alone)
	}
	// The three still waiting: one claim gives up (the next one claims), one fails (the
	// rest claim alone: a failure answers no one else 204).
	var wg sync.WaitGroup
	var mu sync.Mutex
	var after []string
	f.mu.Lock()
	waiting := append([]*flightWaiter(nil), f.by["p"].waiting...)
	f.mu.Unlock()
	if len(waiting) != 3 {
		t.Fatalf("%d waiting, want 3", len(waiting))
	}
	for _, w := range waiting {
		wg.Go(func() {
			<-w.ch
			mu.Lock()
			after = append(after, map[flightAnswer]string{flightEmpty: "empty", flightClaim: "claim", flightAlone: "alone"}[w.answer])
			mu.Unlock()
		})
	}
	slots[0].Done(FlightAbandoned)
	slots[1].Done(FlightFailed)
	slots[1].Done(FlightNothing) // a second report is ignored
	wg.Wait()
	claims, alones := 0, 0
	for _, a := range after {
		switch a {
		case "claim":
			claims++
		case "alone":
			alones++
		default:
			t.Errorf("a waiter was answered %s after a failure", a)
		}
	}
	if claims > 2 || claims+alones != 3 {
		t.Fatalf("after a give-up and a failure: %v", after)
	}

	// A waiter whose request ends leaves the queue with its error.
	f2 := NewFlights()
	lead, _, _ = f2.Enter(ctx, "p", "v1")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, _, err := f2.Enter(cctx, "p", "v1"); done <- err }()
	for {
		f2.mu.Lock()
		n := len(f2.by["p"].waiting)
		f2.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a canceled waiter returned no error")
	}
	f2.mu.Lock()
	n := len(f2.by["p"].waiting)
	f2.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiting after the cancel, want 0", n)
	}
	lead.Done(FlightNothing)
}
