// Package joblogs archives finished builds' logs into the object store and reads a log
// wherever it is, as GitLab keeps them: while a build runs its log is live, in the core's
// keeping (Postgres chunks and a Redis tail: builds.LiveTraces); once the build has
// finished, however it finished, the whole log is archived as one object in the
// ObjectStore, recorded as an Artifact of type "trace" (GitLab's job.log, never expired,
// not deleted with the job's other artifacts), and the live log is dropped. Reads serve
// the archive when it exists, else the live log; a read that loses the live log to an
// archive under way goes on in the archive.
//
// The core does not know this package: it lists a finished build for archiving in the
// transaction that finishes it (a trigger), hands this replica's finishes out on
// builds.Service.TraceArchiveRequests, and offers the live log's sealed reader, its range
// reads and its drop.
package joblogs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// traceFilename is the archived log's file name, GitLab's.
const traceFilename = "job.log"

// Store keeps the list of finished builds whose logs wait to be archived (Postgres: every
// path that finishes a build lists it in the same transaction), their trace artifacts,
// and the list of objects to clean up that an archive's object is on until it commits.
type Store interface {
	// ObjectCleanup lists an archive's object for cleanup until its artifact commits.
	builds.ObjectCleanup
	// ClaimTraceArchives takes up to c.Limit listed builds due at c.Now (only those in
	// c.IDs, when not nil) and makes them due again after c.Lease, so that no other replica
	// works on them meanwhile. Safe on every replica (SKIP LOCKED). In the same statement
	// it lists each unarchived build's ObjectKey for cleanup at c.KeyDue and reads the
	// stored log of those whose log in Postgres is at most c.InlineMax bytes.
	ClaimTraceArchives(ctx context.Context, c ArchiveClaim) ([]ArchiveJob, error)
	// CommitTraceArchive records a build's archived log in one transaction: it takes key
	// (a.ObjectKey) off the cleanup list, inserts a (unless the build has a trace artifact
	// already: then the key is due for removal and the existing row is returned with
	// created false), stores coverage when it is not nil, deletes the build's stored
	// chunks, and takes the build off the list when done (no part of its live log is left
	// outside Postgres), else marks it archived. builds.ErrUploadExpired, with nothing
	// changed, when the key is no longer listed for cleanup. A nil a commits an empty log,
	// without an artifact (its unused key leaves the list).
	CommitTraceArchive(ctx context.Context, buildID int64, key string, a *builds.Artifact, coverage *float64, done bool, now time.Time) (stored builds.Artifact, created bool, err error)
	// TraceArchiveDone takes an archived build off the list and deletes any stored chunks
	// left: its archive is committed and its live log dropped.
	TraceArchiveDone(ctx context.Context, buildID int64) error
	// DeferTraceArchive counts a failed attempt and makes the build due again at due.
	DeferTraceArchive(ctx context.Context, buildID int64, due time.Time, cause string) error
	// TraceArtifact returns a build's trace artifact; builds.ErrNotFound when its log is
	// not archived.
	TraceArtifact(ctx context.Context, buildID int64) (builds.Artifact, error)
	// TraceArchiveBacklog counts the builds listed and the age of the oldest finish among
	// those never archived (0 when none).
	TraceArchiveBacklog(ctx context.Context, now time.Time) (n int64, oldest time.Duration, err error)
}

// ArchiveClaim is what ClaimTraceArchives takes.
type ArchiveClaim struct {
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

// ArchiveJob is one claimed build whose log is to be archived.
type ArchiveJob struct {
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
	Status    builds.Status
	TraceSize int64
	// ObjectKey is where the archive is written, listed for cleanup by the claim ("" when
	// Archived).
	ObjectKey string
	// Inline: Stored is the log's part in Postgres, read by the claim.
	Inline bool
	Stored []byte
}

// ArchivePass counts what archiving a batch did.
type ArchivePass struct {
	// Claimed builds, of which Archived got an object (Bytes in all), Empty had no log,
	// Dropped only needed their live log dropped, and Failed were deferred.
	Claimed, Archived, Empty, Dropped, Failed int
	Bytes                                     int64
}

// Add counts o into p.
func (p *ArchivePass) Add(o ArchivePass) {
	p.Claimed += o.Claimed
	p.Archived += o.Archived
	p.Empty += o.Empty
	p.Dropped += o.Dropped
	p.Failed += o.Failed
	p.Bytes += o.Bytes
}

// Deps are what a Service is built from; every field but Log is required.
type Deps struct {
	// Builds is the core: the builds and their live logs.
	Builds *builds.Service
	// Store keeps the archive list and the trace artifacts (pgstore).
	Store Store
	// Objects holds the archived logs.
	Objects builds.ObjectStore
	// Log receives what the service cannot return (nil: discarded).
	Log *slog.Logger
}

// Service archives finished builds' logs and reads logs, archived or live.
type Service struct {
	builds  *builds.Service
	store   Store
	objects builds.ObjectStore
	log     *slog.Logger
}

// New wires the service. It panics when a required dependency is missing: production
// always gives them, and a service without one would fail later and further away.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("joblogs.New: Deps.Builds is required")
	case d.Store == nil:
		panic("joblogs.New: Deps.Store is required")
	case d.Objects == nil:
		panic("joblogs.New: Deps.Objects is required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{builds: d.Builds, store: d.Store, objects: d.Objects, log: d.Log}
}

// TraceArchiveBacklog counts the builds whose logs wait to be archived and the age of the
// oldest.
func (s *Service) TraceArchiveBacklog(ctx context.Context) (int64, time.Duration, error) {
	return s.store.TraceArchiveBacklog(ctx, s.builds.Now())
}

// traceArtifact returns a build's archived log, nil when it is not archived.
func (s *Service) traceArtifact(ctx context.Context, id int64) (*builds.Artifact, error) {
	a, err := s.store.TraceArtifact(ctx, id)
	if errors.Is(err, builds.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the archive of the log of build %d: %w", id, err)
	}
	return &a, nil
}
