package joblogs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Archiving a finished build's log (GitLab's Ci::ArchiveTraceService, run by its
// ArchiveTraceWorker): after the transaction that finished the build has committed, never
// inside it. The live log streams once through a SHA-256 and the coverage scanner into the
// object store under a key listed for cleanup first; the trace artifact row, the coverage
// and the "archived" mark commit together last; only then is the live log dropped. A
// failure at any step leaves the live log whole and the build listed, due again after a
// backoff; whatever the failed attempt left in the store is removed by the artifacts pass.

// ArchiveLease is how long a claimed build is left to the replica that claimed it before
// another may take it: longer than archiving a log at the trace limit takes.
const ArchiveLease = 10 * time.Minute

// archiveTimeout bounds one build's archive, so that a store that hangs frees the worker
// well before the lease ends.
const archiveTimeout = 5 * time.Minute

// archiveInline bounds the stored log of a build that the claim reads along (its
// statement then reads a batch's whole logs); a longer one is read a few chunks at a time
// while it streams to the store.
const archiveInline = 64 << 10

// archiveBackoff is how long a build whose archive failed for the attempts-th time waits:
// 10 s doubling up to 15 minutes, so an outage of the store is not hammered.
func archiveBackoff(attempts int) time.Duration {
	d := 10 * time.Second
	for i := 1; i < attempts && d < 15*time.Minute; i++ {
		d *= 2
	}
	return min(d, 15*time.Minute)
}

// archiveWorkers is how many logs of a claimed batch are archived at once. An archive
// mostly waits (the seal in Redis, the object store's write, the commit in Postgres), so
// one at a time fell behind a replica's finishes: its backlog grew with the job rate.
// Each build of the batch was claimed for this replica alone (SKIP LOCKED and a lease),
// so no other replica archives it meanwhile.
const archiveWorkers = 4

// ArchiveTraces archives the logs of up to limit finished builds due now (only those in
// ids when ids is not nil), archiveWorkers at a time. Each build's failure is logged and
// deferred, not returned: the error is that of claiming the batch.
func (s *Service) ArchiveTraces(ctx context.Context, limit int, ids []int64) (ArchivePass, error) {
	var res ArchivePass
	now := s.builds.Now()
	jobs, err := s.store.ClaimTraceArchives(ctx, ArchiveClaim{Now: now, Lease: ArchiveLease, Limit: limit, IDs: ids,
		KeyTag: builds.ObjectKeyTag(), KeyDue: now.Add(ArchiveLease + builds.UploadCleanupSlack), InlineMax: archiveInline})
	if err != nil {
		return res, fmt.Errorf("claim logs to archive: %w", err)
	}
	res.Claimed = len(jobs)
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, archiveWorkers)
	for _, j := range jobs {
		slots <- struct{}{}
		if ctx.Err() != nil {
			// Shutting down: the claim's lease runs out and another replica takes the rest.
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			one, err := s.archive(ctx, j)
			if err != nil {
				s.deferArchive(ctx, j, err)
				one = ArchivePass{Failed: 1}
			}
			mu.Lock()
			res.Add(one)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res, ctx.Err()
}

// archive archives one claimed build's log and drops its live log.
func (s *Service) archive(ctx context.Context, j ArchiveJob) (ArchivePass, error) {
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	var res ArchivePass
	if !j.Status.Finished() {
		return res, fmt.Errorf("archive the log of build %d (%s): %w", j.BuildID, j.Status, builds.ErrConflict)
	}
	if j.Archived {
		res.Dropped = 1
	} else {
		a, done, err := s.writeArchive(ctx, j)
		if err != nil {
			return res, err
		}
		if a == nil {
			res.Empty = 1
		} else {
			res.Archived, res.Bytes = 1, a.Size
		}
		if done {
			s.builds.Changed(builds.Change{PipelineID: j.PipelineID, BuildID: j.BuildID, Log: true})
			return res, nil
		}
	}
	if err := s.builds.DropLiveTail(ctx, j.BuildID, j.Status); err != nil {
		return res, fmt.Errorf("drop the live log of build %d after its archive: %w", j.BuildID, err)
	}
	if err := s.store.TraceArchiveDone(ctx, j.BuildID); err != nil {
		// Listed still: the next claim finds it archived and only drops again.
		return res, fmt.Errorf("take build %d off the archive list: %w", j.BuildID, err)
	}
	s.builds.Changed(builds.Change{PipelineID: j.PipelineID, BuildID: j.BuildID, Log: true})
	return res, nil
}

// writeArchive streams the log of a finished build into the store and commits its
// artifact; nil for an empty log (committed without an object). done says the commit took
// the build off the list: nothing of its live log was left in Redis. The log is read from
// what the claim read already (the status, the size Postgres holds and, for a short log,
// what Postgres holds) and what the seal returns (see builds.Service.SealLog).
func (s *Service) writeArchive(ctx context.Context, j ArchiveJob) (*builds.Artifact, bool, error) {
	var read []builds.TraceChunk
	if j.Inline {
		read = []builds.TraceChunk{{Offset: 0, Data: j.Stored}}
	}
	// Sealing fences the live tail first: no append is accepted after it.
	log, live, err := s.builds.SealLog(ctx, j.BuildID, j.Status, j.TraceSize, read)
	if err != nil {
		return nil, false, err
	}
	now := s.builds.Now()
	if j.TraceSize == 0 && !live {
		if _, _, err := s.store.CommitTraceArchive(ctx, j.BuildID, j.ObjectKey, nil, nil, true, now); err != nil {
			return nil, false, fmt.Errorf("mark the empty log of build %d archived: %w", j.BuildID, err)
		}
		return nil, true, nil
	}
	// The claim listed the key for cleanup already.
	a := builds.Artifact{BuildID: j.BuildID, ProjectID: j.ProjectID, PipelineID: j.PipelineID, FileType: builds.ArtifactTypeTrace,
		FileFormat: builds.ArtifactFormatRaw, Filename: traceFilename, CreatedAt: now, ObjectKey: j.ObjectKey}
	body := &archiveReader{r: log, sum: sha256.New(), cov: newCoverageScanner(j.CoverageRegex)}
	n, err := s.objects.Put(ctx, a.ObjectKey, body)
	if err != nil {
		builds.DiscardObject(ctx, s.objects, s.store, s.log, a.ObjectKey)
		return nil, false, fmt.Errorf("write the log of build %d to the object store: %w", j.BuildID, err)
	}
	a.Size, a.SHA256 = n, body.sum.Sum(nil)
	var coverage *float64
	if body.cov != nil {
		if v, ok := body.cov.Result(); ok {
			coverage = &v
		}
	}
	stored, created, err := s.store.CommitTraceArchive(ctx, j.BuildID, a.ObjectKey, &a, coverage, !live, s.builds.Now())
	if err != nil || !created {
		builds.DiscardObject(ctx, s.objects, s.store, s.log, a.ObjectKey)
	}
	if err != nil {
		return nil, false, fmt.Errorf("commit the archived log of build %d: %w", j.BuildID, err)
	}
	if !created && string(stored.SHA256) != string(a.SHA256) {
		// Another replica archived it first (a lease that ran out): its object is the log
		// of record, and a finished build's log does not change.
		s.log.WarnContext(ctx, "log archived twice with different bytes; the first archive is kept",
			"build_id", j.BuildID, "kept_size", stored.Size, "dropped_size", a.Size)
	}
	return &stored, !live, nil
}

// deferArchive logs a failed archive and makes its build due again after a backoff.
func (s *Service) deferArchive(ctx context.Context, j ArchiveJob, cause error) {
	wait := archiveBackoff(j.Attempts + 1)
	s.log.WarnContext(ctx, "log not archived; retried later", "build_id", j.BuildID, "attempt", j.Attempts+1,
		"retry_in", wait.String(), "error", cause)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.store.DeferTraceArchive(ctx, j.BuildID, s.builds.Now().Add(wait), cause.Error()); err != nil {
		// The claim's lease makes it due again all the same.
		s.log.WarnContext(ctx, "failed archive not deferred; retried when its claim runs out", "build_id", j.BuildID, "error", err)
	}
}

// archiveReader is a live log on its way to the store: it takes the SHA-256 and feeds the
// coverage scanner, so the log is read once.
type archiveReader struct {
	r   io.Reader
	sum hash.Hash
	cov *coverageScanner
}

func (t *archiveReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.sum.Write(p[:n])
	if t.cov != nil {
		_, _ = t.cov.Write(p[:n])
	}
	if errors.Is(err, builds.ErrNotFound) {
		err = fmt.Errorf("live log gone while archived: %w", io.ErrUnexpectedEOF)
	}
	return n, err
}
