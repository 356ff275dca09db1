// Package artifacttest_test checks job artifacts end to end: gitlab-runner's
// upload and download (runnerclient mirrors network/gitlab.go of v17.9.3), the operator's
// download, file and delete calls, expiry, and the faults that must leave no artifact and no
// orphaned object: an upload cut off, the object store down mid-upload, a replica SIGKILLed
// mid-upload. Every test runs real replicas on real Postgres and Redis, with the object
// store on disk or on a real S3-protocol server (testenv.S3).
package artifacttest_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/objectstore"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// start is jobapitest.Start with a small Postgres pool: the suite runs a dozen replicas at
// once, and the machine's Postgres has 100 connection slots for every suite.
func start(t *testing.T, o jobapitest.Options) *jobapitest.Instance {
	t.Helper()
	o.Configure = then(o.Configure, func(c *server.Config) { c.DatabaseMaxConns = 4 })
	return jobapitest.Start(t, o)
}

// backend configures a replica's object store.
type backend struct {
	name string
	// configure points a replica at the store (nil: jobapitest's own folder).
	configure func(t *testing.T) func(*server.Config)
}

var backends = []backend{
	{name: "file", configure: func(*testing.T) func(*server.Config) { return nil }},
	{name: "s3", configure: func(t *testing.T) func(*server.Config) {
		srv := testenv.S3(t)
		s3Servers.Store(srv.URL(), srv)
		return onS3(srv)
	}},
}

// onS3 points a replica at an S3 server, through its proxy.
func onS3(srv *testenv.S3Server) func(*server.Config) {
	return func(c *server.Config) {
		c.ObjectStore = srv.URL()
		c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey}
	}
}

// then chains two config edits.
func then(a, b func(*server.Config)) func(*server.Config) {
	return func(c *server.Config) {
		if a != nil {
			a(c)
		}
		if b != nil {
			b(c)
		}
	}
}

// makeZip is an archive of build/app.bin (about n bytes) and build/VERSION, which the
// access and operator tests read back.
func makeZip(t testing.TB, n int64) jobapitest.Archive {
	return jobapitest.MakeZip(t, n, map[string]string{"build/VERSION": "1.2.3\n"})
}

var zipArchive = runnerclient.ArtifactsOptions{BaseName: "artifacts.zip", Format: runnerclient.ArtifactFormatZip,
	Type: runnerclient.ArtifactTypeArchive}

// upload sends one try of an upload and requires an answer.
func upload(t *testing.T, r *jobapitest.Runner, job *runnerclient.Job, c runnerclient.Content, opts runnerclient.ArtifactsOptions) runnerclient.UploadResult {
	t.Helper()
	res, err := r.UploadArtifacts(context.Background(), job, c, opts)
	if err != nil {
		t.Fatalf("upload for job %d: %v", job.ID, err)
	}
	return res
}

func wantUpload(t *testing.T, what string, res runnerclient.UploadResult, code int, state runnerclient.UploadState) {
	t.Helper()
	if res.Code != code || res.State != state {
		t.Fatalf("%s: %d %v (%s), want %d %v", what, res.Code, res.State, res.Message, code, state)
	}
}

// download fetches dep's archive into a hash and returns the result and the bytes' SHA-256.
func download(t *testing.T, r *jobapitest.Runner, dep runnerclient.Dependency) (runnerclient.DownloadResult, [32]byte) {
	t.Helper()
	h := sha256.New()
	res, err := r.DownloadArtifacts(context.Background(), dep, h, nil)
	if err != nil {
		t.Fatalf("download job %d: %v", dep.ID, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return res, sum
}

func wantDownload(t *testing.T, what string, res runnerclient.DownloadResult, code int, state runnerclient.DownloadState) {
	t.Helper()
	if res.Code != code || res.State != state {
		t.Fatalf("%s: %d %v (%s), want %d %v", what, res.Code, res.State, res.Message, code, state)
	}
}

// counts reads what the database holds of artifacts: rows, and objects listed for cleanup.
func counts(t *testing.T, inst *jobapitest.Instance) (artifacts, cleanup int) {
	t.Helper()
	return jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM job_artifacts"),
		jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM object_cleanup")
}

// objects lists the complete objects in the replica's store.
func objects(t *testing.T, inst *jobapitest.Instance) []string {
	t.Helper()
	var keys []string
	if err := inst.Objects.List(context.Background(), "", func(o builds.ObjectInfo) error {
		keys = append(keys, fmt.Sprintf("%s (%d bytes)", o.Key, o.Size))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}
