package builds

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"
)

// Archiving a finished build's log (GitLab's Ci::ArchiveTraceService, run by its
// ArchiveTraceWorker): after the transaction that finished the build has committed, never
// inside it. The live log streams once through a SHA-256 and the coverage scanner into the
// object store under a key listed for cleanup first; the trace artifact row, the coverage
// and the "archived" mark commit together last; only then is the live log dropped. A
// failure at any step leaves the live log whole and the build listed, due again after a
// backoff; whatever the failed attempt left in the store is removed by the artifacts pass.

// TraceArchiveLease is how long a claimed build is left to the replica that claimed it
// before another may take it: longer than archiving a log at the trace limit takes.
const TraceArchiveLease = 10 * time.Minute

// traceArchiveTimeout bounds one build's archive, so that a store that hangs frees the
// worker well before the lease ends.
const traceArchiveTimeout = 5 * time.Minute

// traceArchiveInline bounds the stored log of a build that the claim reads along (its
// statement then reads a batch's whole logs); a longer one is read a few chunks at a time
// while it streams to the store.
const traceArchiveInline = 64 << 10

// traceArchiveBackoff is how long a build whose archive failed for the attempts-th time
// waits: 10 s doubling up to 15 minutes, so an outage of the store is not hammered.
func traceArchiveBackoff(attempts int) time.Duration {
	d := 10 * time.Second
	for i := 1; i < attempts && d < 15*time.Minute; i++ {
		d *= 2
	}
	return min(d, 15*time.Minute)
}

// TraceArchiveRequests delivers the ids of builds this replica just finished, for a worker
// to archive at once (see reaper.Traces); the background pass archives what it misses.
func (s *Service) TraceArchiveRequests() <-chan int64 { return s.archiveRequests }

// requestTraceArchive asks this replica's archive worker to archive a finished build now;
// when the worker is busy the request is dropped, and the pass does it.
func (s *Service) requestTraceArchive(id int64) {
	if s.traces == nil {
		return
	}
	select {
	case s.archiveRequests <- id:
	default:
	}
}

// ArchiveTraces archives the logs of up to limit finished builds due now (only those in
// ids when ids is not nil), one after the other. Each build's failure is logged and
// deferred, not returned: the error is that of claiming the batch.
func (s *Service) ArchiveTraces(ctx context.Context, limit int, ids []int64) (TraceArchivePass, error) {
	var res TraceArchivePass
	if s.traces == nil || s.objects == nil || s.cleanup == nil {
		return res, nil
	}
	now := s.now()
	jobs, err := s.traces.ClaimTraceArchives(ctx, TraceArchiveClaim{Now: now, Lease: TraceArchiveLease, Limit: limit, IDs: ids,
		KeyTag: ObjectKeyTag(), KeyDue: now.Add(TraceArchiveLease + UploadCleanupSlack), InlineMax: traceArchiveInline})
	if err != nil {
		return res, fmt.Errorf("claim logs to archive: %w", err)
	}
	res.Claimed = len(jobs)
	for _, j := range jobs {
		if ctx.Err() != nil {
			// Shutting down: the claim's lease runs out and another replica takes the rest.
			return res, ctx.Err()
		}
		one, err := s.archiveTrace(ctx, j)
		if err != nil {
			res.Failed++
			s.deferTraceArchive(ctx, j, err)
			continue
		}
		res.add(one)
	}
	return res, nil
}

// archiveTrace archives one claimed build's log and drops its live log.
func (s *Service) archiveTrace(ctx context.Context, j TraceArchiveJob) (TraceArchivePass, error) {
	ctx, cancel := context.WithTimeout(ctx, traceArchiveTimeout)
	defer cancel()
	var res TraceArchivePass
	if !j.Status.Finished() {
		return res, fmt.Errorf("archive the log of build %d (%s): %w", j.BuildID, j.Status, ErrConflict)
	}
	if j.Archived {
		res.Dropped = 1
	} else {
		a, done, err := s.writeTraceArchive(ctx, j)
		if err != nil {
			return res, err
		}
		if a == nil {
			res.Empty = 1
		} else {
			res.Archived, res.Bytes = 1, a.Size
		}
		if done {
			s.changed(Change{PipelineID: j.PipelineID, BuildID: j.BuildID, Log: true})
			return res, nil
		}
	}
	if s.live != nil {
		if err := s.live.Drop(ctx, j.BuildID, j.Status); err != nil {
			return res, fmt.Errorf("drop the live log of build %d after its archive: %w: %w", j.BuildID, ErrUnavailable, err)
		}
	}
	if err := s.traces.TraceArchiveDone(ctx, j.BuildID); err != nil {
		// Listed still: the next claim finds it archived and only drops again.
		return res, fmt.Errorf("take build %d off the archive list: %w", j.BuildID, err)
	}
	s.changed(Change{PipelineID: j.PipelineID, BuildID: j.BuildID, Log: true})
	return res, nil
}

// writeTraceArchive streams the log of a finished build into the store and commits its
// artifact; nil for an empty log (committed without an object). done says the commit took
// the build off the list: nothing of its live log was left in Redis. The live log is read
// as LiveLog.Open reads it, from what the claim read already: the status, the size Postgres
// holds and, for a short log, what Postgres holds (the part of a finished build's log in
// Postgres no longer changes: every append to it requires the build on its runner, so the
// claim, which follows the finish's commit, may read it before Redis is closed). Redis is
// closed and read in one call that also drops its bytes when Postgres holds them all (as it
// does after every finish this Service makes, which flushes first).
func (s *Service) writeTraceArchive(ctx context.Context, j TraceArchiveJob) (*Artifact, bool, error) {
	// Sealing fences the live tail first: no append is accepted after it.
	tail, dropped := liveTail{}, true
	if s.live != nil {
		base, data, d, err := s.live.Seal(ctx, j.BuildID, j.Status, j.TraceSize)
		if err != nil {
			return nil, false, fmt.Errorf("close live log of build %d: %w: %w", j.BuildID, ErrUnavailable, err)
		}
		if dropped = d; !d {
			tail = liveTail{base: base, data: data, ok: true}
		}
	}
	now := s.now()
	if j.TraceSize == 0 && dropped {
		if _, _, err := s.traces.CommitTraceArchive(ctx, j.BuildID, j.ObjectKey, nil, nil, true, now); err != nil {
			return nil, false, fmt.Errorf("mark the empty log of build %d archived: %w", j.BuildID, err)
		}
		return nil, true, nil
	}
	// The claim listed the key for cleanup already.
	a := Artifact{BuildID: j.BuildID, ProjectID: j.ProjectID, PipelineID: j.PipelineID, FileType: ArtifactTypeTrace,
		FileFormat: ArtifactFormatRaw, Filename: traceFilename, CreatedAt: now, ObjectKey: j.ObjectKey}
	live := &logReader{ctx: ctx, store: s.store, id: j.BuildID, tail: tail, stored: j.TraceSize}
	if j.Inline {
		live.next, live.haveNext = []TraceChunk{{Offset: 0, Data: j.Stored}}, true
	}
	body := &traceArchiveReader{r: live, sum: sha256.New(), cov: newCoverageScanner(j.CoverageRegex)}
	n, err := s.objects.Put(ctx, a.ObjectKey, body)
	if err != nil {
		s.discardUpload(ctx, a.ObjectKey)
		return nil, false, fmt.Errorf("write the log of build %d to the object store: %w", j.BuildID, err)
	}
	a.Size, a.SHA256 = n, body.sum.Sum(nil)
	var coverage *float64
	if body.cov != nil {
		if v, ok := body.cov.Result(); ok {
			coverage = &v
		}
	}
	stored, created, err := s.traces.CommitTraceArchive(ctx, j.BuildID, a.ObjectKey, &a, coverage, dropped, s.now())
	if err != nil || !created {
		s.discardUpload(ctx, a.ObjectKey)
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
	return &stored, dropped, nil
}

// deferTraceArchive logs a failed archive and makes its build due again after a backoff.
func (s *Service) deferTraceArchive(ctx context.Context, j TraceArchiveJob, cause error) {
	wait := traceArchiveBackoff(j.Attempts + 1)
	s.log.WarnContext(ctx, "log not archived; retried later", "build_id", j.BuildID, "attempt", j.Attempts+1,
		"retry_in", wait.String(), "error", cause)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.traces.DeferTraceArchive(ctx, j.BuildID, s.now().Add(wait), cause.Error()); err != nil {
		// The claim's lease makes it due again all the same.
		s.log.WarnContext(ctx, "failed archive not deferred; retried when its claim runs out", "build_id", j.BuildID, "error", err)
	}
}

// TraceArchiveBacklog counts the builds whose logs wait to be archived and the age of the
// oldest.
func (s *Service) TraceArchiveBacklog(ctx context.Context) (int64, time.Duration, error) {
	if s.traces == nil {
		return 0, 0, nil
	}
	return s.traces.TraceArchiveBacklog(ctx, s.now())
}

// traceArchiveReader is a live log on its way to the store: it takes the SHA-256 and feeds
// the coverage scanner, so the log is read once.
type traceArchiveReader struct {
	r   io.Reader
	sum hash.Hash
	cov *coverageScanner
}

func (t *traceArchiveReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.sum.Write(p[:n])
	if t.cov != nil {
		_, _ = t.cov.Write(p[:n])
	}
	if errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("live log gone while archived: %w", io.ErrUnexpectedEOF)
	}
	return n, err
}
