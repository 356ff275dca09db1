package builds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The live trace: where a running build's log goes, as GitLab's live trace chunks do.
//
// A log is one byte stream the runner owns (gitlab-runner keeps its whole trace and resends
// from any offset the server names), so every copy of the byte at offset k is the same byte,
// and a log is complete when some store holds each offset. Two stores hold it:
//
//   - the durable prefix [0, D): rows of build_trace_chunks in Postgres, contiguous, with
//     D = builds.trace_size. It grows by a full chunk (TraceChunkSize) at a time, in one
//     statement per chunk, and by single PATCHes while Redis refuses writes;
//   - the live tail [B, L) in Redis, with B ≤ D always: B is only ever set to a size
//     Postgres already had, and Postgres never shrinks. A PATCH is one Lua call: append
//     when the runner's offset equals L, else answer L (416).
//
// So the log is Postgres [0, D) followed by Redis [D, L) when L > D. When Redis loses its
// keys (a restart: it keeps nothing on disk) the next PATCH finds no state, reads (status, D)
// from Postgres once, starts the tail at D and answers 416 Range 0-D: the runner resends
// what was lost. When Redis refuses writes the PATCH goes to Postgres (the compare-and-set
// on trace_size), and a runner whose offset is past D is told to resend from D. A final
// update whose output.bytesize is more than the log holds is answered 412: the runner
// rewinds and re-PATCHes, the 416s bring it to where the server's log ends. The finishes
// this Service makes (the final update, the trace limit) store the tail in Postgres in the
// finish's own UPDATE (Finish.Flush), so that a finished log waits for its archive in
// Postgres, not in Redis.
//
// State checks without Postgres: the tail's state field holds running, canceling, closing
// or the final status. The transitions this Service makes (the runner's final update, the
// trace limit, an operator cancel), the reapers and the stuck-stage check (LogsEnded)
// write it; each PATCH re-checks it against Postgres once per LiveTraceCheck per build (that
// statement also records the runner's liveness, which the no-updates reaper reads), which is
// how a deleted runner's jobs reach their runners. The transitions that put a build on its
// runner (an ack, a one-phase claim) arm the tail from their own statement (armLive).
//
// Ordering of a finish the Service makes (Service.finish):
//  1. Fence: the tail's state becomes closing (created so if Redis lost it). From here a
//     PATCH is appended to Postgres by the compare-and-set that requires the build to be
//     running or canceling, so Postgres's row lock orders it against the finish: it commits
//     before the finish, or it is refused with 403.
//  2. The finish commits in Postgres.
//  3. Close: the state becomes the final status; PATCHes get 403 from Redis alone.
//
// So after the finish commits no append is accepted, and every append acknowledged with
// 202 is in Redis before the fence or in Postgres before the commit. A finish that fails
// leaves the tail closing (appends go to Postgres) until a state check finds the fence
// older than any finish takes. A fence that cannot reach Redis is skipped (logged): a Redis
// that comes back may then take appends until the next state check.
//
// The archive: SealLog, like LiveLog.Open of a finished build, closes the tail first, then
// reads Redis, then Postgres, so it has every acknowledged byte, whichever path ended the
// build (the background passes close after their commit). Reading Redis before Postgres
// matters: a chunk flushed meanwhile moves B up only after its Postgres commit, so the
// Postgres read, made later, has it.

// LiveTraces keeps the live tails of build logs (Redis). Every method may fail when Redis
// is unreachable or refuses writes; the Service then uses Postgres.
type LiveTraces interface {
	// Append appends data at offset to build id's tail when the tail is on a runner, its
	// state was checked after now and its size equals offset.
	Append(ctx context.Context, id, offset int64, data []byte, now time.Time) (LiveAppend, error)
	// Arm records the state read from Postgres: a missing tail starts at durable, a present
	// one drops what Postgres holds below durable; the next check is due at checkAt. A
	// final status closes the tail. A closed tail stays closed and a canceling one is not
	// set back to running. It returns the tail's state afterwards.
	Arm(ctx context.Context, id int64, status Status, durable int64, checkAt time.Time) (Status, error)
	// Fence marks the tail closing before a finish commits: appends then go to Postgres,
	// whose compare-and-set on the status orders them against the finish. A missing tail is
	// created closing. Arm replaces a closing tail with a final status, and reopens it only
	// when the fence is older than any finish takes (its finish failed).
	Fence(ctx context.Context, id int64) error
	// Cancel moves a running tail to canceling (nothing else).
	Cancel(ctx context.Context, id int64) error
	// Close sets the tail's state to a final status: no append is accepted after it.
	Close(ctx context.Context, id int64, status Status) error
	// Seal is Close and Tail in one call, for the archive of a finished build: it sets the
	// final status and returns the live bytes; when they all lie below durable (the size
	// Postgres holds) it drops them as Drop does instead (dropped, and no data).
	Seal(ctx context.Context, id int64, status Status, durable int64) (base int64, data []byte, dropped bool, err error)
	// Tail returns where the live bytes start and the bytes (ok=false: no tail).
	Tail(ctx context.Context, id int64) (base int64, data []byte, ok bool, err error)
	// Trim drops the live bytes below durable (Postgres holds them now).
	Trim(ctx context.Context, id, durable int64) error
	// Drop deletes the live bytes and leaves a closed state behind for a while.
	Drop(ctx context.Context, id int64, status Status) error
}

// LeaseArm is Leases that keep the live logs as well (redisstore.Store, given as both
// Deps.Leases and Deps.Live): ReleaseArm is Leases.Release and LiveTraces.Arm in one round
// trip, the Redis work of an ack.
type LeaseArm interface {
	ReleaseArm(ctx context.Context, id int64, status Status, durable int64, checkAt time.Time) (Status, error)
}

// LiveOutcome is what an Append did.
type LiveOutcome int

const (
	LiveAppended LiveOutcome = iota // appended (or nothing to append at the right offset)
	LiveRange                       // offset is not the tail's size: Size says where it ends
	LiveClosed                      // the build left its runner: Status says how it ended
	LiveFenced                      // a finish is committing: append to Postgres
	LiveMissing                     // no tail (never started, or Redis lost it)
	LiveCheckDue                    // the state must be checked against Postgres first
)

// LiveAppend is the answer to an Append: the outcome, the tail's state, its size (the
// log's size as Redis knows it) and where its bytes start.
type LiveAppend struct {
	Outcome LiveOutcome
	Status  Status
	Size    int64
	Base    int64
}

// Defaults of the live trace.
const (
	// DefaultTraceChunkSize is GitLab's Ci::BuildTraceChunk::CHUNK_SIZE.
	DefaultTraceChunkSize = 128 << 10
	// DefaultLiveTraceCheck bounds how long a tail may say running after Postgres changed.
	DefaultLiveTraceCheck = time.Minute
)

// TraceIncompleteError answers a final update whose runner reports a longer log than the
// server holds (a 412: gitlab-runner rewinds its trace and PATCHes it again).
type TraceIncompleteError struct{ Have, Want int64 }

func (e *TraceIncompleteError) Error() string {
	return fmt.Sprintf("the job log holds %d bytes, the runner sent %d: send the log again", e.Have, e.Want)
}

// appendLive appends a masked chunk to the live tail. Only an unreachable or refusing Redis
// sends it to Postgres; a missing or stale state costs one Postgres statement (see
// checkLive), after which the append is tried again.
func (s *Service) appendLive(ctx context.Context, id int64, offset int64, data []byte) (TraceResult, error) {
	for range 3 {
		now := s.now()
		r, err := s.live.Append(ctx, id, offset, data, now)
		if err != nil {
			if ctx.Err() != nil {
				return TraceResult{}, ctx.Err()
			}
			s.faults.Count(ctx, "live_trace_refused_the_append", err)
			return s.appendDurable(ctx, id, offset, data)
		}
		switch r.Outcome {
		case LiveAppended:
			// Running, as this replica knows (a later PUT state=running is a keepalive);
			// the liveness of record is written by the state check once per LiveTraceCheck.
			s.touches.Put(id, now)
			if len(data) > 0 {
				s.changed(Change{BuildID: id, Log: true})
			}
			if r.Size-r.Base >= s.cfg.TraceChunkSize {
				s.flushLive(ctx, id, now)
			}
			return TraceResult{Size: r.Size, Status: r.Status}, nil
		case LiveRange:
			return TraceResult{Size: r.Size, Status: r.Status}, &TraceRangeError{Size: r.Size}
		case LiveClosed:
			s.forgetJob(id)
			return TraceResult{}, &JobForbiddenError{Cause: NotRunning, Status: r.Status}
		case LiveFenced:
			return s.appendDurable(ctx, id, offset, data)
		}
		st, err := s.checkLive(ctx, id, now)
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				// Redis answered the append but not the arm: Postgres takes the chunk.
				return s.appendDurable(ctx, id, offset, data)
			}
			return TraceResult{}, err
		}
		if st == statusClosing {
			return s.appendDurable(ctx, id, offset, data)
		}
		if !st.OnRunnerLog() {
			s.forgetJob(id)
			return TraceResult{}, &JobForbiddenError{Cause: NotRunning, Status: st}
		}
	}
	return TraceResult{}, fmt.Errorf("append trace of build %d: %w", id, ErrConflict)
}

// checkLive reads build id's state and durable size from Postgres (recording the runner's
// liveness in the same statement) and arms its tail with them.
func (s *Service) checkLive(ctx context.Context, id int64, now time.Time) (Status, error) {
	st, durable, err := s.store.TraceState(ctx, id, now)
	if err != nil {
		return "", err
	}
	if !st.OnRunnerLog() && !st.Finished() {
		return st, nil // not on its runner yet (waiting for the ack): nothing to record
	}
	armed, err := s.live.Arm(ctx, id, st, durable, now.Add(s.cfg.LiveTraceCheck))
	if err != nil {
		if !st.OnRunnerLog() {
			return st, nil // Postgres said it; the tail only echoes it
		}
		return "", fmt.Errorf("arm live trace of build %d: %w: %w", id, ErrUnavailable, err)
	}
	return armed, nil
}

// firstLiveCheck bounds when the first state check of a tail armed by armLive is due:
// a cancel that commits between the transition that put the build on its runner and the
// arm finds no tail to mark canceling, and reaches the runner at that check.
const firstLiveCheck = 10 * time.Second

// armLive starts build id's live tail right after this replica put the build on its runner
// (an ack, a one-phase claim), whose statement returned its state and durable size: the
// runner's first PATCH then needs no state check against Postgres, one statement and
// commit fewer per job (that check's liveness write is the transition's own updated_at).
// A failure is logged: the first PATCH finds no tail and checks Postgres, as before.
func (s *Service) armLive(ctx context.Context, id, durable int64, now time.Time) {
	if s.live == nil {
		return
	}
	if _, err := s.live.Arm(ctx, id, StatusRunning, durable, s.firstLiveCheck(now)); err != nil {
		s.faults.Count(ctx, "live_trace_not_armed", err)
	}
}

// firstLiveCheck is when a just-armed live log's state is first checked against Postgres.
func (s *Service) firstLiveCheck(now time.Time) time.Time {
	return now.Add(min(s.cfg.LiveTraceCheck, firstLiveCheck))
}

// appendDurable appends to Postgres with the compare-and-set on trace_size and status.
func (s *Service) appendDurable(ctx context.Context, id int64, offset int64, data []byte) (TraceResult, error) {
	now := s.now()
	size, st, err := s.store.AppendTrace(ctx, id, offset, data, now)
	var rangeErr *TraceRangeError
	switch {
	case err == nil:
		s.touches.Put(id, now) // an append wrote updated_at
		s.changed(Change{BuildID: id, Log: true})
		return TraceResult{Size: size, Status: st}, nil
	case errors.As(err, &rangeErr):
		return TraceResult{Size: rangeErr.Size, Status: st}, err
	case errors.Is(err, ErrConflict):
		s.forgetJob(id)
		return TraceResult{}, &JobForbiddenError{Cause: NotRunning, Status: st}
	}
	return TraceResult{}, err
}

// flushLive moves build id's full chunks of live bytes to Postgres, one statement, and drops
// them from Redis. Only while the build is on a runner: a finished
// build's tail stays for the archive. Failures are logged: the bytes stay live and the next
// full chunk tries again.
func (s *Service) flushLive(ctx context.Context, id int64, now time.Time) {
	base, data, ok, err := s.live.Tail(ctx, id)
	if err != nil || !ok {
		return
	}
	data = data[:int64(len(data))/s.cfg.TraceChunkSize*s.cfg.TraceChunkSize]
	if len(data) == 0 {
		return
	}
	durable, err := s.store.FlushTrace(ctx, id, base, data, now)
	if err != nil {
		s.faults.Count(ctx, "live_trace_chunk_not_flushed_to_postgres", err)
		return
	}
	if durable > base {
		if err := s.live.Trim(ctx, id, durable); err != nil {
			// Harmless: the next flush's compare-and-set fails, reads the size and trims.
			s.faults.Count(ctx, "live_trace_not_trimmed", err)
		}
	}
}

// liveCovers reports whether build u.ID's live tail reaches the runner's bytesize, for the
// final update's path without a read.
func (s *Service) liveCovers(ctx context.Context, u JobUpdate) bool {
	if s.live == nil {
		return false
	}
	base, data, ok, err := s.live.Tail(ctx, u.ID)
	return err == nil && ok && base+int64(len(data)) >= u.Bytesize
}

// statusClosing is the tail's state while a finish commits (never a build's status).
const statusClosing Status = "closing"

// liveFence marks build id's tail closing before a finish of a build on its runner commits.
// Without it (Redis unreachable) a Redis that comes back may take appends until the state
// check or the archive's close: they are kept, but the runner hears late that its job ended.
func (s *Service) liveFence(ctx context.Context, f Finish) {
	if s.live == nil || !slices.ContainsFunc(f.From, Status.OnRunnerLog) {
		return
	}
	if err := s.live.Fence(ctx, f.BuildID); err != nil {
		s.faults.Count(ctx, "live_trace_not_fenced_before_a_finish", err)
	}
}

// liveClose closes build id's tail after a transition this Service made committed, so that
// the runner's next PATCH is refused without a Postgres read.
func (s *Service) liveClose(ctx context.Context, id int64, st Status) {
	if s.live == nil {
		return
	}
	if err := s.live.Close(ctx, id, st); err != nil {
		s.faults.Count(ctx, "live_trace_not_closed", err)
	}
}

// LogsEnded closes the live logs of builds a background pass took from their runners
// (reapers, stuck stages), after its commit: their runners' next PATCHes are refused without a Postgres
// read. Until then, and if Redis cannot be reached, the state check or the archive's close
// refuses them; what Redis took meanwhile is still read by the archive.
func (s *Service) LogsEnded(ctx context.Context, ended []Build) {
	for _, b := range ended {
		s.liveClose(ctx, b.ID, b.Status)
	}
}

// liveCancel tells the runner of a build whose cancel was requested on its next PATCH.
func (s *Service) liveCancel(ctx context.Context, id int64) {
	if s.live == nil {
		return
	}
	if err := s.live.Cancel(ctx, id); err != nil {
		s.faults.Count(ctx, "live_trace_not_told_of_the_cancel", err)
	}
}

// logSize is the size of build b's log: the durable part or the live tail's end.
func (s *Service) logSize(ctx context.Context, b Build) int64 {
	if s.live == nil {
		return b.TraceSize
	}
	base, data, ok, err := s.live.Tail(ctx, b.ID)
	if err != nil || !ok {
		return b.TraceSize
	}
	return max(b.TraceSize, base+int64(len(data)))
}

// checkFinalLog answers a final update whose runner holds more log than the server: gitlab-
// runner then rewinds and PATCHes it again (412). Before the finish, the live tail goes to
// Postgres, so that a finished build's log does not depend on Redis until it is archived.
func (s *Service) checkFinalLog(ctx context.Context, b Build, u JobUpdate) error {
	if u.Bytesize <= 0 {
		return nil
	}
	if have := s.logSize(ctx, b); have < u.Bytesize {
		return &TraceIncompleteError{Have: have, Want: u.Bytesize}
	}
	return nil
}

// flushBeforeFinish is build id's live tail, for the finish this Service makes to store in
// its own UPDATE of the build (Finish.Flush): a finished build's log then does not depend on
// Redis until it is archived, and its trace_size is the whole log's. Nil when there is
// nothing to move (or Redis cannot say): the bytes then stay live for the archive.
func (s *Service) flushBeforeFinish(ctx context.Context, id int64) *TraceFlush {
	if s.live == nil {
		return nil
	}
	base, data, ok, err := s.live.Tail(ctx, id)
	if err != nil || !ok || len(data) == 0 {
		return nil
	}
	return &TraceFlush{Offset: base, Data: data}
}

// liveTrim drops from build id's tail, which started at base, what Postgres holds now
// (durable). A failure is logged: the bytes are in both, which every reader allows.
func (s *Service) liveTrim(ctx context.Context, id, base, durable int64) {
	if durable <= base {
		return
	}
	if err := s.live.Trim(ctx, id, durable); err != nil {
		s.faults.Count(ctx, "live_trace_not_trimmed", err)
	}
}

// OnRunnerLog reports whether a build in this state accepts log appends.
func (s Status) OnRunnerLog() bool { return s == StatusRunning || s == StatusCanceling }
