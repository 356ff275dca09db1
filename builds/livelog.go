package builds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// LiveLog reads the log of a build that is not archived yet, as one stream in offset order:
// the chunks in Postgres (flushed ones, and those written while Redis refused writes)
// followed by the live tail in Redis. Drop deletes both once the archive holds the log.
type LiveLog interface {
	// Open returns the whole log. For a finished build it first closes the live tail, so
	// that no append can be accepted after the read (the fence: see livetrace.go); it
	// fails with ErrUnavailable when Redis cannot be reached then, as a log read without
	// its tail would be incomplete. ErrNotFound when there is no such build.
	Open(ctx context.Context, id int64) (io.ReadCloser, error)
	// Drop deletes the log's chunks in Redis and Postgres, leaving the tail closed. Call it
	// only for a finished build whose log is archived.
	Drop(ctx context.Context, id int64) error
}

// LiveLog returns the service's reader of logs not archived yet.
func (s *Service) LiveLog() LiveLog { return liveLog{s} }

type liveLog struct{ s *Service }

func (l liveLog) Open(ctx context.Context, id int64) (io.ReadCloser, error) {
	b, err := l.s.store.Build(ctx, id)
	if err != nil {
		return nil, err
	}
	t := liveTail{}
	if l.s.live != nil {
		if b.Status.Finished() {
			if err := l.s.live.Close(ctx, id, b.Status); err != nil {
				return nil, fmt.Errorf("close live log of build %d: %w: %w", id, ErrUnavailable, err)
			}
		}
		base, data, ok, err := l.s.live.Tail(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("read live log of build %d: %w: %w", id, ErrUnavailable, err)
		}
		t = liveTail{base: base, data: data, ok: ok}
	}
	return &logReader{ctx: ctx, store: l.s.store, id: id, tail: t, stored: -1}, nil
}

func (l liveLog) Drop(ctx context.Context, id int64) error {
	b, err := l.s.store.Build(ctx, id)
	if err != nil {
		return err
	}
	if !b.Status.Finished() {
		return fmt.Errorf("drop live log of build %d (%s): %w", id, b.Status, ErrConflict)
	}
	if l.s.live != nil {
		if err := l.s.live.Drop(ctx, id, b.Status); err != nil {
			return fmt.Errorf("drop live log of build %d: %w: %w", id, ErrUnavailable, err)
		}
	}
	return l.s.store.DeleteTraceChunks(ctx, id)
}

// ArtifactTypeTrace is a build's archived log (GitLab's file_type trace): once a build has
// finished, however it finished, package joblogs archives its whole log as one object,
// recorded as an Artifact of this type (GitLab's job.log, never expired, not deleted with
// the job's other artifacts), and drops the live log.
const ArtifactTypeTrace = "trace"

// TraceArchiveRequests delivers the ids of builds this replica just finished, for a worker
// to archive their logs at once (see reaper.TraceArchiver); the background pass archives
// what it misses.
func (s *Service) TraceArchiveRequests() <-chan int64 { return s.archiveRequests }

// requestTraceArchive asks this replica's archive worker to archive a finished build now;
// when the worker is busy (or there is none) the request is dropped, and the pass does it.
func (s *Service) requestTraceArchive(id int64) {
	select {
	case s.archiveRequests <- id:
	default:
	}
}

// SealLog closes a finished build's live log to appends and returns the whole log, for its
// archive (package joblogs). It reads the log as LiveLog.Open does, from what the archive's
// claim read already: the status, the size Postgres holds (stored) and, for a short log,
// Postgres's part itself (read; nil when the claim did not read it). The part of a finished
// build's log in Postgres no longer changes: every append to it requires the build on its
// runner, so the claim, which follows the finish's commit, may read it before Redis is
// closed. Redis is closed and read in one call that also drops its bytes when Postgres
// holds them all (as it does after every finish this Service makes, which flushes first):
// live is then false. When live is true, the archive drops the tail (DropLiveTail) after
// its commit.
func (s *Service) SealLog(ctx context.Context, id int64, status Status, stored int64, read []TraceChunk) (log io.Reader, live bool, err error) {
	tail := liveTail{}
	if s.live != nil {
		base, data, dropped, err := s.live.Seal(ctx, id, status, stored)
		if err != nil {
			return nil, false, fmt.Errorf("close live log of build %d: %w: %w", id, ErrUnavailable, err)
		}
		if !dropped {
			tail, live = liveTail{base: base, data: data, ok: true}, true
		}
	}
	r := &logReader{ctx: ctx, store: s.store, id: id, tail: tail, stored: stored}
	if read != nil {
		r.next, r.haveNext = read, true
	}
	return r, live, nil
}

// DropLiveTail deletes a finished build's live bytes in Redis once its archive holds them,
// leaving a closed state behind for a while. ErrUnavailable when Redis cannot do it.
func (s *Service) DropLiveTail(ctx context.Context, id int64, status Status) error {
	if s.live == nil {
		return nil
	}
	if err := s.live.Drop(ctx, id, status); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// liveTail is a snapshot of a build's live bytes: data starts at offset base.
type liveTail struct {
	base int64
	data []byte
	ok   bool
}

func (t liveTail) end() int64 { return t.base + int64(len(t.data)) }

// from returns the tail's bytes in [from, to), or nil when it does not hold from.
func (t liveTail) slice(from, to int64) []byte {
	if !t.ok || from < t.base || from >= t.end() || to <= from {
		return nil
	}
	return t.data[from-t.base : min(to, t.end())-t.base]
}

// readTail reads build id's live bytes for a view: an unreachable Redis shows the durable
// part only (logged), as a page with the log's head is better than an error.
func (s *Service) readTail(ctx context.Context, id int64) liveTail {
	if s.live == nil {
		return liveTail{}
	}
	base, data, ok, err := s.live.Tail(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "live log unreadable: showing its durable part", "build_id", id, "error", err)
		return liveTail{}
	}
	return liveTail{base: base, data: data, ok: ok}
}

// logReader streams a log: Postgres chunks a few at a time, then the tail from where they
// end. The tail was read before the chunks: its base is a size Postgres had then, so the
// chunks read later reach it.
type logReader struct {
	ctx   context.Context
	store Store
	id    int64
	tail  liveTail
	// stored is the size of the log's Postgres part when the reader knows it (a finished
	// build's, from the archive's claim; -1 when not): no query is made past it, and a log
	// that ends before it is a gap.
	stored int64
	// next are chunks read already from pos on (haveNext: use them before querying).
	next     []TraceChunk
	haveNext bool

	pos    int64  // offset of the next byte to return
	cur    []byte // bytes from pos on, ready to return
	pgDone bool
	done   bool
}

// logChunksPerRead bounds a read's memory: chunks are at most a PATCH (1 MiB) or a flushed
// live chunk (TraceChunkSize and a PATCH).
const logChunksPerRead = 4

var errLogGap = errors.New("log has a gap between its stored and live parts")

func (r *logReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.pos += int64(n)
	return n, nil
}

func (r *logReader) fill() error {
	if r.done {
		return io.EOF
	}
	if !r.pgDone {
		chunks := r.next
		if r.haveNext {
			r.next, r.haveNext = nil, false
		} else if r.stored < 0 || r.pos < r.stored {
			var err error
			if chunks, err = r.store.TraceChunks(r.ctx, r.id, r.pos, logChunksPerRead); err != nil {
				return err
			}
		}
		var buf bytes.Buffer
		at := r.pos
		for _, c := range chunks {
			end := c.Offset + int64(len(c.Data))
			if c.Offset > at {
				break // not contiguous: the tail must hold the rest
			}
			if end > at {
				buf.Write(c.Data[at-c.Offset:])
				at = end
			}
		}
		if buf.Len() > 0 {
			r.cur = buf.Bytes()
			return nil
		}
		r.pgDone = true
	}
	r.done = true
	if r.tail.ok && r.tail.end() > r.pos {
		if r.tail.base > r.pos {
			return fmt.Errorf("build %d: %w (stored up to %d, live from %d)", r.id, errLogGap, r.pos, r.tail.base)
		}
		r.cur = r.tail.slice(r.pos, r.tail.end())
		return nil
	}
	if r.pos < r.stored {
		return fmt.Errorf("build %d: %w (read up to %d, stored %d)", r.id, errLogGap, r.pos, r.stored)
	}
	return io.EOF
}

func (r *logReader) Close() error { return nil }

// traceRangeLive completes a range read from Postgres (data from min(from, size), size the
// durable size) with the live tail.
func traceRangeLive(t liveTail, data []byte, size, from, max int64) ([]byte, int64) {
	if !t.ok || t.end() <= size {
		return data, size
	}
	total := t.end()
	from = min(max0(from), total)
	to := min(from+max0(max), total)
	start := from
	if start > size {
		data = nil
	}
	have := start + int64(len(data))
	if have < to {
		data = append(data, t.slice(have, to)...)
	}
	return data, total
}

func max0(v int64) int64 { return max(v, 0) }

// LiveTraceRange returns up to max bytes of a build's live log (not archived) from offset
// from, and the log's size: Postgres's chunks completed with the tail in Redis.
func (s *Service) LiveTraceRange(ctx context.Context, id, from, max int64) ([]byte, int64, error) {
	tail := s.readTail(ctx, id) // first: see logReader
	data, size, err := s.store.TraceRange(ctx, id, from, max)
	if err != nil {
		return nil, 0, err
	}
	data, size = traceRangeLive(tail, data, size, from, max)
	return data, size, nil
}

// LiveTraceLines counts the line breaks before offset before in a build's live log.
func (s *Service) LiveTraceLines(ctx context.Context, id, before int64) (int64, error) {
	if before <= 0 {
		return 0, nil
	}
	tail := s.readTail(ctx, id)
	if !tail.ok || before <= tail.base {
		return s.store.TraceLines(ctx, id, before)
	}
	// Lines past the durable size are in the tail only.
	_, durable, err := s.store.TraceRange(ctx, id, 0, 0)
	if err != nil {
		return 0, err
	}
	n, err := s.store.TraceLines(ctx, id, min(before, durable))
	if err != nil {
		return 0, err
	}
	return n + int64(bytes.Count(tail.slice(max(durable, tail.base), before), []byte{'\n'})), nil
}
