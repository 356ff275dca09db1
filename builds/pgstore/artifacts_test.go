package pgstore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/testenv"
)

// commit stores an artifact of build b as the service does: listed for cleanup first, the
// row committed last.
func commit(t *testing.T, store *Store, b builds.Build, fileType, key string, data []byte) (builds.Artifact, bool, error) {
	t.Helper()
	if err := store.BeginUpload(t.Context(), key, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return store.CommitArtifact(t.Context(), builds.Artifact{BuildID: b.ID, ProjectID: b.ProjectID, PipelineID: b.PipelineID,
		FileType: fileType, FileFormat: "zip", Filename: "artifacts.zip", Size: int64(len(data)), SHA256: sum[:],
		ObjectKey: key, CreatedAt: time.Now()})
}

func cleanupKeys(t *testing.T, store *Store) map[string]bool {
	t.Helper()
	rows, err := store.pool.Query(t.Context(), `SELECT object_key FROM object_cleanup`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	keys := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys[k] = true
	}
	return keys
}

// The claim fills a dependency's artifacts_file from its stored archive, and a commit takes
// the upload off the cleanup list in its own transaction; the same bytes again are the same
// artifact, other bytes a conflict, and both leave the new object to the cleanup.
func TestArtifactCommitAndClaim(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 4, Stages: []string{"build", "test"}, Jobs: []builds.JobDefinition{
		{Name: "compile", Stage: "build", Script: []string{"make"}, Artifacts: archive("build/")},
		{Name: "unit", Stage: "test", Script: []string{"make test"}},
	}})
	compile := c.take(t)
	data := []byte("PK\x05\x06" + string(make([]byte, 18)))
	a, created, err := commit(t, store, compile.Build, "archive", "artifacts/4/1/archive-a", data)
	if err != nil || !created || a.ID == 0 || a.Size != int64(len(data)) {
		t.Fatalf("commit: %+v created %v, %v", a, created, err)
	}
	again, created, err := commit(t, store, compile.Build, "archive", "artifacts/4/1/archive-b", data)
	if err != nil || created || again.ID != a.ID {
		t.Errorf("the same bytes again: %+v created %v, %v; want the stored artifact", again, created, err)
	}
	if _, _, err := commit(t, store, compile.Build, "archive", "artifacts/4/1/archive-c", []byte("other")); !errors.Is(err, artifacts.ErrExists) {
		t.Errorf("other bytes: %v, want ErrArtifactExists", err)
	}
	keys := cleanupKeys(t, store)
	if keys["artifacts/4/1/archive-a"] || !keys["artifacts/4/1/archive-b"] || !keys["artifacts/4/1/archive-c"] {
		t.Errorf("cleanup list %v: want the redundant b and c, not the committed a", keys)
	}
	// An upload whose key the cleanup took (it ran past its timeout) cannot commit.
	if err := store.BeginUpload(t.Context(), "artifacts/4/1/junit-late", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CleanObjects(t.Context(), time.Now().Add(time.Minute), 10, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	late := builds.Artifact{BuildID: compile.ID, ProjectID: 4, PipelineID: compile.PipelineID, FileType: "junit",
		FileFormat: "gzip", Filename: "j.gz", SHA256: make([]byte, 32), ObjectKey: "artifacts/4/1/junit-late", CreatedAt: time.Now()}
	if _, _, err := store.CommitArtifact(t.Context(), late); !errors.Is(err, builds.ErrUploadExpired) {
		t.Errorf("commit after the cleanup took the key: %v, want ErrUploadExpired", err)
	}

	c.succeed(t, compile.ID)
	unit := c.take(t)
	if len(unit.Dependencies) != 1 || unit.Dependencies[0].ArtifactsFile == nil ||
		*unit.Dependencies[0].ArtifactsFile != (builds.ArtifactsFile{Filename: "artifacts.zip", Size: int64(len(data))}) {
		t.Fatalf("unit's dependencies: %+v, want compile with its archive", unit.Dependencies)
	}

	// Deleting the artifact queues its object for cleanup.
	deleted, err := store.DeleteArtifacts(t.Context(), compile.ID)
	if err != nil || len(deleted) != 1 || !bytes.Equal(deleted[0].SHA256, a.SHA256) {
		t.Fatalf("delete: %+v, %v", deleted, err)
	}
	if !cleanupKeys(t, store)["artifacts/4/1/archive-a"] {
		t.Error("the deleted artifact's object is not queued for cleanup")
	}
}

// An artifact keeps its job's artifacts:access and the archive's expose_as (migration
// 000022); none given is access all. The table refuses an access GitLab does not know and
// an expose_as on a report, whatever a caller sends.
func TestArtifactAccessAndExposeAs(t *testing.T) {
	t.Parallel()
	store := New(testenv.Pool(t))
	c := newClaimer(t, store)
	createPipeline(t, store, builds.PipelineDefinition{ProjectID: 5, Stages: []string{"build"}, Jobs: []builds.JobDefinition{
		{Name: "compile", Stage: "build", Script: []string{"make"}, Artifacts: archive("build/")},
	}})
	b := c.take(t).Build
	put := func(a builds.Artifact) (builds.Artifact, error) {
		if err := store.BeginUpload(t.Context(), a.ObjectKey, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		a.BuildID, a.ProjectID, a.PipelineID, a.FileFormat, a.Filename, a.SHA256, a.CreatedAt = b.ID, b.ProjectID, b.PipelineID, "zip", "a.zip", make([]byte, 32), time.Now()
		stored, _, err := store.CommitArtifact(t.Context(), a)
		return stored, err
	}
	if a, err := put(builds.Artifact{FileType: "archive", ObjectKey: "k/archive", Access: "none", ExposeAs: "Build output"}); err != nil ||
		a.Access != "none" || a.ExposeAs != "Build output" {
		t.Fatalf("archive: %+v, %v", a, err)
	}
	if a, err := put(builds.Artifact{FileType: "junit", ObjectKey: "k/junit"}); err != nil || a.Access != "all" || a.ExposeAs != "" {
		t.Fatalf("report without access: %+v, %v", a, err)
	}
	list, err := store.Artifacts(t.Context(), b.ID)
	if err != nil || len(list) != 2 || list[0].Access != "none" || list[0].ExposeAs != "Build output" || list[1].Access != "all" {
		t.Errorf("read back: %+v, %v", list, err)
	}
	for _, bad := range []builds.Artifact{
		{FileType: "dotenv", ObjectKey: "k/dotenv", Access: "everyone"},
		{FileType: "cobertura", ObjectKey: "k/cobertura", ExposeAs: "Coverage"},
	} {
		if _, err := put(bad); err == nil {
			t.Errorf("%+v was stored", bad)
		}
	}
}
