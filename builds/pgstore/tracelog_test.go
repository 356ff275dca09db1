package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/testenv"
)

// TestTraceArchiveClaims: a build is listed for archiving by the transaction that finishes
// it; concurrent claims take disjoint builds; a claimed build is not due again before its
// lease ends, a deferred one before its backoff.
func TestTraceArchiveClaims(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	var jobs []builds.JobDefinition
	for i := range 6 {
		jobs = append(jobs, builds.JobDefinition{Name: fmt.Sprintf("j%d", i), Script: []string{"true"}})
	}
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 3, Jobs: jobs})
	now := time.Now()
	if js, err := claimArchives(t, store, now, 10, nil); err != nil || len(js) != 0 {
		t.Fatalf("claims before any finish: %v, %v", js, err)
	}
	var ids []int64
	for range 6 {
		b := c.take(t)
		c.succeed(t, b.ID)
		ids = append(ids, b.ID)
	}
	first, err := claimArchives(t, store, now, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := claimArchives(t, store, now, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 4 || len(second) != 2 {
		t.Fatalf("claims of 4 among 6: %d then %d", len(first), len(second))
	}
	seen := map[int64]bool{}
	for _, j := range append(first, second...) {
		if seen[j.BuildID] || j.ProjectID != 3 || j.Archived || j.Status != builds.StatusSuccess {
			t.Errorf("claim %+v: taken twice or wrong", j)
		}
		seen[j.BuildID] = true
		// The claim lists the key its archive writes for cleanup, before any object exists.
		var listed bool
		if err := store.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM object_cleanup WHERE object_key = $1)`, j.ObjectKey).Scan(&listed); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("artifacts/3/%d/trace-", j.BuildID); !listed || len(j.ObjectKey) <= len(want) || j.ObjectKey[:len(want)] != want {
			t.Errorf("claim of build %d: key %q listed for cleanup %v; want artifacts/3/<build>/trace-<tag>, listed", j.BuildID, j.ObjectKey, listed)
		}
	}
	if js, _ := claimArchives(t, store, now.Add(59*time.Second), 10, nil); len(js) != 0 {
		t.Errorf("claimed again within the lease: %d", len(js))
	}
	if err := store.DeferTraceArchive(t.Context(), ids[0], now.Add(time.Hour), "store down"); err != nil {
		t.Fatal(err)
	}
	js, err := claimArchives(t, store, now.Add(2*time.Minute), 10, nil)
	if err != nil || len(js) != 5 {
		t.Fatalf("after the lease: %d claimed (%v), want the 5 not deferred", len(js), err)
	}
	js, err = claimArchives(t, store, now.Add(2*time.Hour), 10, []int64{ids[0]})
	if err != nil || len(js) != 1 || js[0].BuildID != ids[0] || js[0].Attempts != 1 {
		t.Fatalf("the deferred build after its backoff: %+v, %v", js, err)
	}
}

// claimArchives claims as the archive pass does, with a key tag of its own per call.
func claimArchives(t *testing.T, store *Store, now time.Time, limit int, ids []int64) ([]joblogs.ArchiveJob, error) {
	t.Helper()
	return store.ClaimTraceArchives(t.Context(), joblogs.ArchiveClaim{Now: now, Lease: time.Minute, Limit: limit, IDs: ids,
		KeyTag: fmt.Sprintf("t%d", time.Now().UnixNano()), KeyDue: now.Add(time.Hour), InlineMax: 1 << 10})
}

// TestCommitTraceArchive: the archive's bookkeeping is one statement. The claim reads a
// short log along; the commit takes the key off the cleanup list, inserts the artifact with
// the coverage, deletes the chunks and takes the build off the list (or marks it archived
// when the live log still has a part to drop). A second archive of the build is redundant:
// its key is due for removal at once and the first artifact is returned. A key the
// artifacts pass took changes nothing.
func TestCommitTraceArchive(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 4, Jobs: []builds.JobDefinition{
		{Name: "a", Script: []string{"true"}}, {Name: "b", Script: []string{"true"}}}})
	ctx := t.Context()
	now := time.Now()
	var ids []int64
	for range 2 {
		b := c.take(t)
		if _, _, err := store.AppendTrace(ctx, b.ID, 0, []byte("hello "), now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.AppendTrace(ctx, b.ID, 6, []byte("world\n"), now); err != nil {
			t.Fatal(err)
		}
		c.succeed(t, b.ID)
		ids = append(ids, b.ID)
	}
	js, err := claimArchives(t, store, now, 10, nil)
	if err != nil || len(js) != 2 {
		t.Fatalf("claim: %+v, %v", js, err)
	}
	for _, j := range js {
		if !slices.Contains(ids, j.BuildID) {
			t.Fatalf("claimed build %d, listed were %v", j.BuildID, ids)
		}
		if !j.Inline || string(j.Stored) != "hello world\n" || j.TraceSize != 12 {
			t.Fatalf("claim of build %d: inline %v %q size %d; want the stored log along", j.BuildID, j.Inline, j.Stored, j.TraceSize)
		}
	}
	query := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := store.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cov := 81.5
	art := func(j joblogs.ArchiveJob) *builds.Artifact {
		return &builds.Artifact{BuildID: j.BuildID, ProjectID: j.ProjectID, PipelineID: j.PipelineID, FileType: builds.ArtifactTypeTrace,
			FileFormat: builds.ArtifactFormatRaw, Filename: "job.log", Size: 12, SHA256: make([]byte, 32), ObjectKey: j.ObjectKey, CreatedAt: now}
	}

	// Done: off the list at once.
	first := js[0]
	stored, created, err := store.CommitTraceArchive(ctx, first.BuildID, first.ObjectKey, art(first), &cov, true, now)
	if err != nil || !created || stored.ID == 0 || stored.Access != "all" || stored.ObjectKey != first.ObjectKey {
		t.Fatalf("commit: %+v created=%v %v", stored, created, err)
	}
	if n := query(`SELECT count(*) FROM object_cleanup WHERE object_key = $1`, first.ObjectKey); n != 0 {
		t.Errorf("key still listed for cleanup after the commit")
	}
	if n := query(`SELECT count(*) FROM build_trace_chunks WHERE build_id = $1`, first.BuildID); n != 0 {
		t.Errorf("%d chunks left after the commit", n)
	}
	if n := query(`SELECT count(*) FROM trace_archives WHERE build_id = $1`, first.BuildID); n != 0 {
		t.Errorf("build still listed after a done commit")
	}
	if n := query(`SELECT count(*) FROM builds WHERE id = $1 AND coverage = 81.5`, first.BuildID); n != 1 {
		t.Errorf("coverage not stored")
	}
	if got, err := store.TraceArtifact(ctx, first.BuildID); err != nil || got.ID != stored.ID {
		t.Errorf("trace artifact: %+v %v; want %d", got, err, stored.ID)
	}

	// A redundant archive of the same build (a claim whose lease ran out elsewhere).
	again := art(first)
	again.ObjectKey = first.ObjectKey + "-again"
	if _, err := store.pool.Exec(ctx, `INSERT INTO object_cleanup (object_key, due_at) VALUES ($1, 'infinity')`, again.ObjectKey); err != nil {
		t.Fatal(err)
	}
	kept, created, err := store.CommitTraceArchive(ctx, first.BuildID, again.ObjectKey, again, &cov, true, now)
	if err != nil || created || kept.ID != stored.ID {
		t.Fatalf("redundant commit: %+v created=%v %v; want the first artifact", kept, created, err)
	}
	if n := query(`SELECT count(*) FROM object_cleanup WHERE object_key = $1 AND due_at = '-infinity'`, again.ObjectKey); n != 1 {
		t.Errorf("the redundant object is not due for removal at once")
	}

	// Not done: marked archived, the list keeps it until TraceArchiveDone.
	second := js[1]
	if _, created, err := store.CommitTraceArchive(ctx, second.BuildID, second.ObjectKey, art(second), nil, false, now); err != nil || !created {
		t.Fatalf("commit, live log left: created=%v %v", created, err)
	}
	if n := query(`SELECT count(*) FROM trace_archives WHERE build_id = $1 AND archived_at IS NOT NULL`, second.BuildID); n != 1 {
		t.Errorf("build not marked archived")
	}
	if js, err := claimArchives(t, store, now.Add(2*time.Minute), 10, nil); err != nil || len(js) != 1 || !js[0].Archived || js[0].ObjectKey != "" {
		t.Errorf("claim of an archived build: %+v, %v; want it archived, without a key", js, err)
	}
	if err := store.TraceArchiveDone(ctx, second.BuildID); err != nil {
		t.Fatal(err)
	}
	if n := query(`SELECT count(*) FROM trace_archives`); n != 0 {
		t.Errorf("%d builds listed after TraceArchiveDone", n)
	}

	// A key the artifacts pass took: nothing changes.
	if _, err := store.pool.Exec(ctx, `INSERT INTO trace_archives (build_id) VALUES ($1)`, second.BuildID); err != nil {
		t.Fatal(err)
	}
	gone := art(second)
	gone.ObjectKey = "artifacts/gone"
	if _, _, err := store.CommitTraceArchive(ctx, second.BuildID, gone.ObjectKey, gone, nil, true, now); !errors.Is(err, builds.ErrUploadExpired) {
		t.Errorf("commit with an expired key: %v, want ErrUploadExpired", err)
	}
	if n := query(`SELECT count(*) FROM trace_archives WHERE build_id = $1 AND archived_at IS NULL`, second.BuildID); n != 1 {
		t.Errorf("an expired key's commit changed the list")
	}
}
