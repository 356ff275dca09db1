package joblogs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/jobapi/jobapi/builds"
)

// TraceContent is a build's log opened for reading anywhere (http.ServeContent serves
// HTTP ranges from it): its archive when it has one, else its live log as long as it was
// when opened. Nothing is buffered beyond the caller's slice.
type TraceContent struct {
	*traceReader
	// Size is the length of the log read.
	Size int64
	// Archive is the archived log's artifact (nil: the live log is read).
	Archive *builds.Artifact
}

// OpenTrace opens a project's job's log. builds.ErrNotFound when there is no such job.
func (s *Service) OpenTrace(ctx context.Context, projectID, id int64) (*TraceContent, error) {
	if _, err := s.builds.ProjectJob(ctx, projectID, id); err != nil {
		return nil, err
	}
	return s.openTrace(ctx, id)
}

func (s *Service) openTrace(ctx context.Context, id int64) (*TraceContent, error) {
	r := &traceReader{ctx: ctx, svc: s, id: id}
	archive, err := s.traceArtifact(ctx, id)
	if err != nil {
		return nil, err
	}
	if archive != nil {
		r.archive, r.size = archive, archive.Size
		if err := r.openArchive(); err != nil {
			return nil, err
		}
		return &TraceContent{traceReader: r, Size: r.size, Archive: archive}, nil
	}
	_, size, err := s.builds.LiveTraceRange(ctx, id, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("open the log of build %d: %w", id, err)
	}
	r.size = size
	if size == 0 {
		// The build may have been archived between the two reads, and its live log dropped.
		if archive, err = s.traceArtifact(ctx, id); err != nil {
			return nil, err
		}
		if archive != nil {
			r.archive, r.size = archive, archive.Size
		}
	}
	if err := r.openArchive(); err != nil {
		return nil, err
	}
	return &TraceContent{traceReader: r, Size: r.size, Archive: r.archive}, nil
}

// openArchive opens an archived log's stream at its start before the caller answers: the
// trace endpoint's http.ServeContent sends its status before its first read, so a store
// that is down or refusing must fail here (a 503) rather than under a 200 whose body
// breaks off. A read elsewhere (a Range) reopens it there.
func (t *traceReader) openArchive() error {
	if t.archive == nil || t.size == 0 {
		return nil
	}
	rc, err := t.svc.objects.Open(t.ctx, t.archive.ObjectKey, 0, -1)
	if err != nil {
		return err
	}
	t.rc, t.rcOff = rc, 0
	return nil
}

// liveReadWindow is what one read of a live log asks of Postgres and Redis at most.
const liveReadWindow = 1 << 20

// traceReader reads a log as an io.ReadSeeker: an archive keeping one stream and reopening
// it only where a read does not follow the last one; a live log a window at a time
// (builds.Service.LiveTraceRange), holding nothing between reads. A live log that is
// archived and dropped while it is read goes on from the archive at the same offset: a
// finished build's log does not change, so the bytes are the same.
type traceReader struct {
	ctx  context.Context
	svc  *Service
	id   int64
	size int64

	mu      sync.Mutex
	archive *builds.Artifact
	off     int64 // Read and Seek position
	rc      io.ReadCloser
	rcOff   int64 // where rc reads next
}

func (t *traceReader) readAt(p []byte, off int64) (int, error) {
	if off >= t.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), t.size-off)]
	if t.archive == nil {
		p = p[:min(len(p), liveReadWindow)]
		data, _, err := t.svc.builds.LiveTraceRange(t.ctx, t.id, off, int64(len(p)))
		if err == nil && len(data) == len(p) {
			return copy(p, data), nil
		}
		// The live log came short: archived and dropped while we read? Go on in the archive.
		archive, aerr := t.svc.traceArtifact(t.ctx, t.id)
		if aerr != nil {
			return 0, aerr
		}
		if archive == nil || archive.Size < t.size {
			if err == nil {
				err = fmt.Errorf("log of build %d: %d bytes at %d, want %d: %w", t.id, len(data), off, len(p), io.ErrUnexpectedEOF)
			}
			return 0, err
		}
		t.archive = archive
	}
	if t.rc == nil || t.rcOff != off {
		if t.rc != nil {
			_ = t.rc.Close()
			t.rc = nil
		}
		rc, err := t.svc.objects.Open(t.ctx, t.archive.ObjectKey, off, -1)
		if err != nil {
			return 0, err
		}
		t.rc, t.rcOff = rc, off
	}
	n, err := io.ReadFull(t.rc, p)
	t.rcOff += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("archived log of build %d ended at byte %d of %d: %w", t.id, t.rcOff, t.size, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (t *traceReader) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.readAt(p, t.off)
	t.off += int64(n)
	return n, err
}

func (t *traceReader) Seek(offset int64, whence int) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += t.off
	case io.SeekEnd:
		offset += t.size
	default:
		return 0, errors.New("seek: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("seek: negative position")
	}
	t.off = offset
	return offset, nil
}

func (t *traceReader) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rc == nil {
		return nil
	}
	err := t.rc.Close()
	t.rc = nil
	return err
}

// archived opens an archived log.
func (s *Service) archived(ctx context.Context, id int64, archive *builds.Artifact) *TraceContent {
	return &TraceContent{traceReader: &traceReader{ctx: ctx, svc: s, id: id, archive: archive, size: archive.Size},
		Size: archive.Size, Archive: archive}
}

// Trace returns a build's whole log. For small logs and tests: servers stream with
// OpenTrace.
func (s *Service) Trace(ctx context.Context, projectID, id int64) ([]byte, error) {
	t, err := s.OpenTrace(ctx, projectID, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = t.Close() }()
	return io.ReadAll(t)
}

// TraceRange returns up to max bytes of a project's job's log from offset from, and the
// log's size; the archive when the log is archived, else the live log.
func (s *Service) TraceRange(ctx context.Context, projectID, id, from, max int64) ([]byte, int64, error) {
	if _, err := s.builds.ProjectJob(ctx, projectID, id); err != nil {
		return nil, 0, err
	}
	archive, err := s.traceArtifact(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if archive == nil {
		return s.builds.LiveTraceRange(ctx, id, from, max)
	}
	t := s.archived(ctx, id, archive)
	defer func() { _ = t.Close() }()
	from = min(max0(from), t.Size)
	n := min(max0(max), t.Size-from)
	if n == 0 {
		return []byte{}, t.Size, nil
	}
	if _, err := t.Seek(from, io.SeekStart); err != nil {
		return nil, 0, err
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(t, out); err != nil {
		return nil, 0, fmt.Errorf("read the log of build %d: %w", id, err)
	}
	return out, t.Size, nil
}

// TraceLines counts the line breaks before offset before in a build's log: in an archive
// by reading it as a stream. A log only grows, and an archive is the log it was, so the
// count for an offset never changes: callers may keep it.
func (s *Service) TraceLines(ctx context.Context, id, before int64) (int64, error) {
	if before <= 0 {
		return 0, nil
	}
	archive, err := s.traceArtifact(ctx, id)
	if err != nil {
		return 0, err
	}
	if archive == nil {
		return s.builds.LiveTraceLines(ctx, id, before)
	}
	t := s.archived(ctx, id, archive)
	defer func() { _ = t.Close() }()
	var c lineCounter
	if _, err := io.CopyN(&c, t, min(before, t.Size)); err != nil {
		return 0, fmt.Errorf("count the lines of the log of build %d: %w", id, err)
	}
	return c.n, nil
}

func max0(v int64) int64 { return max(v, 0) }

type lineCounter struct{ n int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n += int64(bytes.Count(p, []byte{'\n'}))
	return len(p), nil
}
