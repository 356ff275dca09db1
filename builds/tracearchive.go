package builds

import (
	"bufio"
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
	if s.traces == nil || s.objects == nil || s.artifacts == nil {
		return res, nil
	}
	jobs, err := s.traces.ClaimTraceArchives(ctx, s.now(), TraceArchiveLease, limit, ids)
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
	if j.Archived {
		res.Dropped = 1
	} else {
		a, err := s.writeTraceArchive(ctx, j)
		if err != nil {
			return res, err
		}
		if a == nil {
			res.Empty = 1
		} else {
			res.Archived, res.Bytes = 1, a.Size
		}
	}
	if err := s.LiveLog().Drop(ctx, j.BuildID); err != nil {
		return res, fmt.Errorf("drop the live log of build %d after its archive: %w", j.BuildID, err)
	}
	if err := s.traces.TraceArchiveDone(ctx, j.BuildID); err != nil {
		// Listed still: the next claim finds it archived and only drops again.
		return res, fmt.Errorf("take build %d off the archive list: %w", j.BuildID, err)
	}
	s.changed(Change{PipelineID: j.PipelineID, BuildID: j.BuildID, Log: true})
	return res, nil
}

// writeTraceArchive streams the live log into the store and commits its artifact; nil for
// an empty log (marked archived without an object).
func (s *Service) writeTraceArchive(ctx context.Context, j TraceArchiveJob) (*Artifact, error) {
	// Open fences the live tail of a finished build first: no append is accepted after it.
	rc, err := s.LiveLog().Open(ctx, j.BuildID)
	if err != nil {
		return nil, fmt.Errorf("open the live log of build %d: %w", j.BuildID, err)
	}
	defer func() { _ = rc.Close() }()
	live := bufio.NewReaderSize(rc, 64<<10)
	now := s.now()
	if _, err := live.Peek(1); errors.Is(err, io.EOF) {
		if _, _, err := s.traces.CommitTraceArchive(ctx, j.BuildID, nil, nil, now); err != nil {
			return nil, fmt.Errorf("mark the empty log of build %d archived: %w", j.BuildID, err)
		}
		return nil, nil
	}
	a := Artifact{BuildID: j.BuildID, ProjectID: j.ProjectID, PipelineID: j.PipelineID, FileType: ArtifactTypeTrace,
		FileFormat: ArtifactFormatRaw, Filename: traceFilename, CreatedAt: now,
		ObjectKey: fmt.Sprintf("artifacts/%d/%d/%s-%s", j.ProjectID, j.BuildID, ArtifactTypeTrace, randomKey())}
	if err := s.artifacts.BeginUpload(ctx, a.ObjectKey, now.Add(traceArchiveTimeout+uploadCleanupSlack)); err != nil {
		return nil, fmt.Errorf("register the archive of build %d: %w", j.BuildID, err)
	}
	body := &traceArchiveReader{r: live, sum: sha256.New(), cov: newCoverageScanner(j.CoverageRegex)}
	n, err := s.objects.Put(ctx, a.ObjectKey, body)
	if err != nil {
		s.discardUpload(ctx, a.ObjectKey)
		return nil, fmt.Errorf("write the log of build %d to the object store: %w", j.BuildID, err)
	}
	a.Size, a.SHA256 = n, body.sum.Sum(nil)
	var coverage *float64
	if body.cov != nil {
		if v, ok := body.cov.Result(); ok {
			coverage = &v
		}
	}
	stored, created, err := s.traces.CommitTraceArchive(ctx, j.BuildID, &a, coverage, s.now())
	if err != nil || !created {
		s.discardUpload(ctx, a.ObjectKey)
	}
	if err != nil {
		return nil, fmt.Errorf("commit the archived log of build %d: %w", j.BuildID, err)
	}
	if !created && string(stored.SHA256) != string(a.SHA256) {
		// Another replica archived it first (a lease that ran out): its object is the log
		// of record, and a finished build's log does not change.
		s.log.WarnContext(ctx, "log archived twice with different bytes; the first archive is kept",
			"build_id", j.BuildID, "kept_size", stored.Size, "dropped_size", a.Size)
	}
	return &stored, nil
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
