package pgstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/testenv"
)

func pushProject(t *testing.T, store *Store, repoURL string) int64 {
	t.Helper()
	p, err := store.CreateProject(t.Context(), builds.Project{Name: "app", Path: fmt.Sprintf("app-%d", time.Now().UnixNano()),
		RepoURL: repoURL, DefaultBranch: "main", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// Many requests claiming one delivery id at once (replicas behind a balancer receiving a
// forge's retry): one claim wins; the others see it, with the pipeline it recorded.
func TestClaimDeliveryOnce(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	id := pushProject(t, store, "")
	d := pushes.Delivery{ProjectID: id, Forge: pushes.GitHub, ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Event: "push", ReceivedAt: time.Now()}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, claimed, err := store.ClaimDelivery(t.Context(), d); err != nil {
				t.Error(err)
			} else if claimed {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims won, want 1", wins.Load())
	}
	if err := store.DeliveryCreated(t.Context(), d, 42); err != nil {
		t.Fatal(err)
	}
	earlier, claimed, err := store.ClaimDelivery(t.Context(), d)
	if err != nil || claimed || earlier.PipelineID != 42 || earlier.Event != "push" {
		t.Fatalf("replay: %+v claimed=%v %v; want the earlier claim with pipeline 42", earlier, claimed, err)
	}
	// The same id from another forge, or for another project, is another delivery.
	other := d
	other.Forge = pushes.Gitea
	if _, claimed, err := store.ClaimDelivery(t.Context(), other); err != nil || !claimed {
		t.Fatalf("same id, other forge: claimed=%v %v; want claimed", claimed, err)
	}
	// A released claim (its pipeline failed) may be claimed again; one with a pipeline stays.
	if err := store.ReleaseDelivery(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if _, claimed, err := store.ClaimDelivery(t.Context(), other); err != nil || !claimed {
		t.Fatalf("after release: claimed=%v %v; want claimed again", claimed, err)
	}
	if err := store.ReleaseDelivery(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	if _, claimed, _ := store.ClaimDelivery(t.Context(), d); claimed {
		t.Fatal("a claim that created a pipeline was released")
	}
	missing := d
	missing.ProjectID = id + 1000
	if _, _, err := store.ClaimDelivery(t.Context(), missing); !errors.Is(err, builds.ErrNotFound) {
		t.Fatalf("claim for a missing project: %v, want ErrNotFound", err)
	}
	// Past retention, ids are forgotten.
	n, err := store.PruneDeliveries(t.Context(), time.Now().Add(time.Hour), 1000)
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want the 2 claims", n, err)
	}
}

// Replicas that read the same old head race to move it: one moves it; a ref new to the
// poll is inserted once; a deleted one is forgotten once.
func TestMoveHeadOnce(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	id := pushProject(t, store, "file:///nowhere")
	const a, b = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	if err := store.RecordHeads(t.Context(), id, []pushes.Head{{Ref: "refs/heads/main", SHA: a}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	race := func(ref, old, new string) int32 {
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				moved, err := store.MoveHead(t.Context(), id, ref, old, new, time.Now())
				if err != nil {
					t.Error(err)
				} else if moved {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		return wins.Load()
	}
	if n := race("refs/heads/main", a, b); n != 1 {
		t.Errorf("move main a→b: %d winners, want 1", n)
	}
	if n := race("refs/tags/v1", "", a); n != 1 {
		t.Errorf("new tag: %d winners, want 1", n)
	}
	if n := race("refs/tags/v1", a, ""); n != 1 {
		t.Errorf("deleted tag: %d winners, want 1", n)
	}
	heads, err := store.Heads(t.Context(), id)
	if err != nil || len(heads) != 1 || heads["refs/heads/main"] != b {
		t.Fatalf("heads %v, %v; want main at b only", heads, err)
	}
	// A first poll records without moving what is there.
	if err := store.RecordHeads(t.Context(), id, []pushes.Head{{Ref: "refs/heads/main", SHA: a}, {Ref: "refs/heads/dev", SHA: a}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if heads, _ = store.Heads(t.Context(), id); heads["refs/heads/main"] != b || heads["refs/heads/dev"] != a {
		t.Fatalf("heads %v after a second record; want main kept at b, dev added", heads)
	}
}

// Settings: defaults for a project never set; polling turned on is due at once, unprimed,
// with the heads of an earlier polling forgotten; claims take a due project once per
// interval whatever the number of passes.
func TestPushSettingsAndPollClaims(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	id := pushProject(t, store, "file:///repo.git")
	st, err := store.PushSettings(t.Context(), id)
	if err != nil || st.WebhookSecret != "" || st.PollInterval != 0 || st.PolledAt != nil {
		t.Fatalf("defaults: %+v, %v", st, err)
	}
	if _, err := store.PushSettings(t.Context(), id+1000); !errors.Is(err, builds.ErrNotFound) {
		t.Fatalf("missing project: %v, want ErrNotFound", err)
	}
	secret := "0123456789abcdef0123"
	if _, err := store.UpdatePushSettings(t.Context(), id+1000, pushes.Change{WebhookSecret: &secret}, time.Now()); !errors.Is(err, builds.ErrNotFound) {
		t.Fatalf("update a missing project: %v, want ErrNotFound", err)
	}
	now := time.Now()
	minute := time.Minute
	st, err = store.UpdatePushSettings(t.Context(), id, pushes.Change{WebhookSecret: &secret, PollInterval: &minute}, now)
	if err != nil || st.WebhookSecret != secret || st.PollInterval != time.Minute {
		t.Fatalf("update: %+v, %v", st, err)
	}
	var wg sync.WaitGroup
	var claims atomic.Int32
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := store.ClaimPolls(t.Context(), now.Add(time.Second), 10)
			if err != nil {
				t.Error(err)
			}
			for _, target := range got {
				if target.ProjectID == id {
					claims.Add(1)
					if target.Primed || target.RepoURL != "file:///repo.git" {
						t.Errorf("target %+v: want unprimed, with its repo_url", target)
					}
				}
			}
		}()
	}
	wg.Wait()
	if claims.Load() != 1 {
		t.Fatalf("%d passes claimed the due project, want 1", claims.Load())
	}
	if got, _ := store.ClaimPolls(t.Context(), now.Add(30*time.Second), 10); len(got) != 0 {
		t.Fatalf("claimed again within the interval: %+v", got)
	}
	if got, _ := store.ClaimPolls(t.Context(), now.Add(62*time.Second), 10); len(got) != 1 {
		t.Fatalf("not claimed after the interval: %+v", got)
	}
	if err := store.RecordHeads(t.Context(), id, []pushes.Head{{Ref: "refs/heads/main", SHA: "1111111111111111111111111111111111111111"}}, now); err != nil {
		t.Fatal(err)
	}
	if err := store.Polled(t.Context(), id, now, ""); err != nil {
		t.Fatal(err)
	}
	if target, err := store.PollTarget(t.Context(), id); err != nil || !target.Primed {
		t.Fatalf("after a poll: %+v, %v; want primed", target, err)
	}
	// The secret alone changes nothing about polling.
	other := "fedcba9876543210fedc"
	if st, err = store.UpdatePushSettings(t.Context(), id, pushes.Change{WebhookSecret: &other}, now); err != nil || st.PolledAt == nil || st.PollInterval != time.Minute {
		t.Fatalf("secret change: %+v, %v; want polling as it was", st, err)
	}
	// Off, then on again: unprimed and the old heads forgotten.
	off := time.Duration(0)
	if _, err := store.UpdatePushSettings(t.Context(), id, pushes.Change{PollInterval: &off}, now); err != nil {
		t.Fatal(err)
	}
	if st, err = store.UpdatePushSettings(t.Context(), id, pushes.Change{PollInterval: &minute}, now); err != nil || st.PolledAt != nil {
		t.Fatalf("turned on again: %+v, %v; want unprimed", st, err)
	}
	if heads, _ := store.Heads(t.Context(), id); len(heads) != 0 {
		t.Fatalf("heads %v kept across polling turned off and on", heads)
	}
}
