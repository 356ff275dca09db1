package builds

import (
	"context"
	"time"
)

// Job logs, as GitLab keeps them: while a build runs its log is live,
// appended where appends are cheap (Redis, Postgres underneath: see livetrace.go and
// LiveLog in livelog.go); once the build has finished,
// however it finished, the whole log is archived as one object in the ObjectStore, recorded
// as an Artifact of type "trace" (GitLab's job.log, never expired, not deleted with the
// job's other artifacts), and the live chunks are dropped. Reads serve the archive when it
// exists, else the live log; a read that loses the live log to an archive under way goes
// on in the archive.

// ArtifactTypeTrace is a build's archived log (GitLab's file_type trace).
const ArtifactTypeTrace = "trace"

// traceFilename is the archived log's file name, GitLab's.
const traceFilename = "job.log"

// TraceArchiveStore keeps the list of finished builds whose logs wait to be archived
// (Postgres: every path that finishes a build lists it in the same transaction).
type TraceArchiveStore interface {
	// ClaimTraceArchives takes up to c.Limit listed builds due at c.Now (only those in
	// c.IDs, when not nil) and makes them due again after c.Lease, so that no other replica
	// works on them meanwhile. Safe on every replica (SKIP LOCKED). In the same statement
	// it lists each unarchived build's ObjectKey for cleanup at c.KeyDue and reads the
	// stored log of those whose log in Postgres is at most c.InlineMax bytes.
	ClaimTraceArchives(ctx context.Context, c TraceArchiveClaim) ([]TraceArchiveJob, error)
	// CommitTraceArchive records a build's archived log in one transaction: it takes key
	// (a.ObjectKey) off the cleanup list, inserts a (unless the build has a trace artifact
	// already: then the key is due for removal and the existing row is returned with
	// created false), stores coverage when it is not nil, deletes the build's stored
	// chunks, and takes the build off the list when done (no part of its live log is left
	// outside Postgres), else marks it archived. ErrUploadExpired, with nothing changed,
	// when the key is no longer listed for cleanup. A nil a commits an empty log, without
	// an artifact (its unused key leaves the list).
	CommitTraceArchive(ctx context.Context, buildID int64, key string, a *Artifact, coverage *float64, done bool, now time.Time) (stored Artifact, created bool, err error)
	// TraceArchiveDone takes an archived build off the list and deletes any stored chunks
	// left: its archive is committed and its live log dropped.
	TraceArchiveDone(ctx context.Context, buildID int64) error
	// DeferTraceArchive counts a failed attempt and makes the build due again at due.
	DeferTraceArchive(ctx context.Context, buildID int64, due time.Time, cause string) error
	// TraceArtifact returns a build's trace artifact; ErrNotFound when its log is not
	// archived.
	TraceArtifact(ctx context.Context, buildID int64) (Artifact, error)
	// TraceArchiveBacklog counts the builds listed and the age of the oldest finish among
	// those never archived (0 when none).
	TraceArchiveBacklog(ctx context.Context, now time.Time) (n int64, oldest time.Duration, err error)
}

// TraceArchiveClaim is what ClaimTraceArchives takes.
type TraceArchiveClaim struct {
	Now   time.Time
	Lease time.Duration
	Limit int
	IDs   []int64
	// KeyTag makes the objects' keys of this claim unique: an unarchived build's archive
	// is written under "artifacts/<project>/<build>/trace-<KeyTag>", listed for cleanup
	// at KeyDue.
	KeyTag string
	KeyDue time.Time
	// InlineMax bounds the stored logs the claim returns (each, in bytes).
	InlineMax int64
}

// TraceArchiveJob is one claimed build whose log is to be archived.
type TraceArchiveJob struct {
	BuildID, ProjectID, PipelineID int64
	// CoverageRegex is the job's coverage regex: the archive computes the coverage on the
	// way ("" none).
	CoverageRegex string
	// Attempts counts the earlier failed attempts.
	Attempts int
	// Archived: the archive is committed and only the live log is left to drop.
	Archived bool
	// Status is the build's final status and TraceSize the size of its log in Postgres,
	// read by the claim: a finished build's stored log no longer grows.
	Status    Status
	TraceSize int64
	// ObjectKey is where the archive is written, listed for cleanup by the claim ("" when
	// Archived).
	ObjectKey string
	// Inline: Stored is the log's part in Postgres, read by the claim.
	Inline bool
	Stored []byte
}

// TraceArchivePass counts what archiving a batch did.
type TraceArchivePass struct {
	// Claimed builds, of which Archived got an object (Bytes in all), Empty had no log,
	// Dropped only needed their live log dropped, and Failed were deferred.
	Claimed, Archived, Empty, Dropped, Failed int
	Bytes                                     int64
}

func (p *TraceArchivePass) add(o TraceArchivePass) {
	p.Claimed += o.Claimed
	p.Archived += o.Archived
	p.Empty += o.Empty
	p.Dropped += o.Dropped
	p.Failed += o.Failed
	p.Bytes += o.Bytes
}
