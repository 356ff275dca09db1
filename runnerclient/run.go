package runnerclient

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"time"
)

// gitlab-runner's defaults (common/consts.go) that shape RunJob.
const (
	defaultUpdateInterval = 3 * time.Second  // DefaultUpdateInterval: trace period before the server's hint
	maxUpdateInterval     = 15 * time.Minute // MaxUpdateInterval: cap on the server's hint
	forceSendInterval     = 30 * time.Second // MinTraceForceSendInterval: touch after this long without a sent update
	tracePatchLimit       = 1 << 20          // DefaultTracePatchLimit: bytes per PATCH
	traceOutputLimit      = 4 << 20          // DefaultTraceOutputLimit: the log is cut after this
	afterScriptTimeout    = 5 * time.Minute  // AfterScriptTimeout
	finalUpdateRetryLimit = 10               // job_status_final_update_retry_limit
	finalUpdateBackoffMax = 60 * time.Minute // DefaultfinalUpdateBackoffMax
)

// Failure reasons the runner sets itself.
const (
	ReasonScriptFailure       = "script_failure"
	ReasonRunnerSystemFailure = "runner_system_failure"
	ReasonJobExecutionTimeout = "job_execution_timeout"
	ReasonUnknownFailure      = "unknown_failure"
	ReasonJobCanceled         = "job_canceled"
	reasonJobAborted          = "job_aborted" // internal to the runner; never a Rails reason
)

// Executor runs one step of a job and writes its output to out. It returns
// an *ExitError when the script exits non-zero and ctx's error when ctx ends
// (the job was canceled, aborted or timed out).
type Executor interface {
	Run(ctx context.Context, job *Job, step Step, out io.Writer) error
}

// ExitError is a script that exited with a non-zero code.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }

// Result is how a job ended for the runner.
type Result int

const (
	Succeeded Result = iota + 1 // final update success
	Failed                      // final update failed (script failure, timeout, system failure)
	Canceled                    // the server asked (Job-Status: canceling); final update failed/job_canceled
	Aborted                     // the server took the job back mid-run (403, Job-Status failed/canceled)
	Dropped                     // the ack was refused; nothing was run or sent after it
)

func (r Result) String() string {
	switch r {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Canceled:
		return "canceled"
	case Aborted:
		return "aborted"
	case Dropped:
		return "dropped"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// Outcome is what RunJob did.
type Outcome struct {
	Result  Result
	AckCode int // HTTP status of the ack (0: no response)

	// The final update as sent ("" when none was): state, failure reason
	// after the runner's mapping, exit code.
	State         string
	FailureReason string
	ExitCode      int

	FinalCode    int         // HTTP status of the last final update (0: none, or no response)
	FinalState   UpdateState // how the runner read it; UpdateSucceeded means the server took it
	FinalUpdates int         // final updates sent, retries included
	Patches      int         // PATCH requests sent
	Touches      int         // keep-alive updates (state=running) sent while the job ran

	Trace []byte // the whole log, what checksum and bytesize describe
}

var (
	errJobCanceled = errors.New("canceled")
	errJobAborted  = errors.New("aborted")
	errJobTimeout  = errors.New("execution took longer than the job timeout")
)

// RunJob does what `gitlab-runner run` does with a job RequestJob returned:
// ack it (PUT running), run its steps through exec while streaming the log
// (PATCH trace every update interval, touch after 30 s of silence), then send
// the final update until the server takes it.
//
// The error is set when ctx ends, when no response arrived for the ack or
// the final update, or when the final update failed finalUpdateRetryLimit
// times; Outcome says how far the job got in every case.
func (c *Client) RunJob(ctx context.Context, job *Job, exec Executor) (Outcome, error) {
	if job == nil {
		return Outcome{}, errors.New("runnerclient: RunJob needs a job")
	}
	t := &jobTrace{c: c, job: job, interval: defaultUpdateInterval}

	// The ack: once, right away, no retry (commands/multi.go requestJob).
	// Only UpdateAbort stops the job; a 409 or 500 does not.
	ack, err := c.UpdateJob(ctx, job, StateRunning, UpdateOptions{})
	out := Outcome{AckCode: ack.Code}
	if ack.State == UpdateAbort {
		out.Result = Dropped
		return out, err
	}
	if ack.CancelRequested {
		return t.finish(ctx, out, Canceled, StateFailed, ReasonJobCanceled, 0)
	}

	// Abort ends everything; cancel and the job timeout end the script but
	// let after_script run (Build.run, Build.executeScript).
	abortCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	jobCtx, stopTimer := context.WithTimeoutCause(abortCtx, job.Timeout(), errJobTimeout)
	defer stopTimer()
	scriptCtx, cancel := context.WithCancelCause(jobCtx)
	defer cancel(nil)
	t.cancel = func() { cancel(errJobCanceled) }
	t.abort = func() { abort(errJobAborted) }

	stopWatch := t.watch(ctx)
	scriptErr := runSteps(scriptCtx, abortCtx, job, exec, t)
	stopWatch()

	if ctx.Err() != nil {
		out.Trace = t.bytes()
		return out, ctx.Err()
	}
	cause := context.Cause(scriptCtx)
	var exitErr *ExitError
	switch {
	case errors.Is(cause, errJobAborted):
		// The runner still sends a final update; the server should 403 it.
		return t.finish(ctx, out, Aborted, StateFailed, reasonJobAborted, 0)
	case errors.Is(cause, errJobCanceled):
		fmt.Fprintf(t, "ERROR: Job failed: canceled\n")
		return t.finish(ctx, out, Canceled, StateFailed, ReasonJobCanceled, 0)
	case errors.Is(cause, errJobTimeout):
		// "1h0m0s seconds": sic, the runner formats a Duration here too.
		fmt.Fprintf(t, "ERROR: Job failed: execution took longer than %v seconds\n", job.Timeout())
		return t.finish(ctx, out, Failed, StateFailed, ReasonJobExecutionTimeout, 0)
	case scriptErr == nil:
		fmt.Fprintf(t, "Job succeeded\n")
		return t.finish(ctx, out, Succeeded, StateSuccess, "", 0)
	case errors.As(scriptErr, &exitErr):
		fmt.Fprintf(t, "ERROR: Job failed: exit code %d\n", exitErr.Code)
		return t.finish(ctx, out, Failed, StateFailed, ReasonScriptFailure, exitErr.Code)
	default:
		fmt.Fprintf(t, "ERROR: Job failed (system failure): %v\n", scriptErr)
		return t.finish(ctx, out, Failed, StateFailed, ReasonRunnerSystemFailure, 0)
	}
}

// runSteps mirrors Build.executeScript: every step but after_script in
// order until one fails, then after_script whatever happened (even after a
// cancel, with its own timeout), unless the job was aborted. after_script
// errors never change the result.
func runSteps(scriptCtx, abortCtx context.Context, job *Job, exec Executor, out io.Writer) error {
	var err error
	for _, s := range job.Steps {
		if s.Name == "after_script" {
			continue
		}
		if err = exec.Run(scriptCtx, job, s, out); err != nil {
			break
		}
		if scriptCtx.Err() != nil {
			break
		}
	}
	for _, s := range job.Steps {
		if s.Name != "after_script" || abortCtx.Err() != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(abortCtx, afterScriptTimeout)
		_ = exec.Run(ctx, job, s, out)
		cancel()
	}
	return err
}

// mapFailureReason mirrors failureReasonMapper.Map: the runner sends only
// the reasons the job's features.failure_reasons lists, plus three every
// GitLab knows; others go through a compatibility map or become
// unknown_failure. So job_canceled reaches the server only if it lists it.
func mapFailureReason(reason string, supported []string) string {
	if reason == "" {
		return ReasonScriptFailure
	}
	supported = append(slices.Clip(supported), ReasonScriptFailure, ReasonRunnerSystemFailure, ReasonJobExecutionTimeout)
	compat := map[string]string{
		"image_pull_failure":                 ReasonRunnerSystemFailure,
		"runner_configuration_error":         ReasonScriptFailure,
		"runner_external_dependency_failure": ReasonRunnerSystemFailure,
	}
	for range 10 { // maxMappingDepth
		if slices.Contains(supported, reason) {
			return reason
		}
		next, ok := compat[reason]
		if !ok {
			break
		}
		reason = next
	}
	return ReasonUnknownFailure
}

// jobTrace mirrors clientJobTrace: the log buffer, what of it the server has,
// and the update interval the server asked for.
type jobTrace struct {
	c      *Client
	job    *Job
	cancel func() // graceful: stop the script, keep after_script
	abort  func() // hard stop

	mu       sync.Mutex
	buf      []byte
	full     bool      // the output limit was hit
	sent     int       // bytes the server confirmed
	sentAt   time.Time // last successful patch or update; zero makes the first idle tick touch
	interval time.Duration
	patches  int
	touches  int
}

// Write mirrors trace.Buffer: bytes are kept until the log is one past
// the 4 MiB limit, then a notice is added and the rest dropped, so a
// runner's log can end a little over 4 MiB.
func (t *jobTrace) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full {
		return len(p), nil
	}
	if room := traceOutputLimit + 1 - len(t.buf); len(p) >= room {
		t.buf = append(t.buf, p[:room]...)
		t.buf = fmt.Appendf(t.buf, "\n\x1b[31;1mJob's log exceeded limit of %d bytes.\x1b[0;m\n", traceOutputLimit)
		t.full = true
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

func (t *jobTrace) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.buf)
}

func (t *jobTrace) output() (checksum string, size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("crc32:%08x", crc32.ChecksumIEEE(t.buf)), len(t.buf)
}

func (t *jobTrace) getInterval() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.interval
}

// setInterval mirrors clientJobTrace.setUpdateInterval: the server's hint
// wins when positive, capped at 15 min.
func (t *jobTrace) setInterval(d time.Duration) {
	if d <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.interval = min(d, maxUpdateInterval)
}

// watch mirrors clientJobTrace.watch: every update interval, send new log
// and touch the job if it has been quiet. The returned func stops the loop
// and waits for it, so no patch races the final update.
func (t *jobTrace) watch(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			timer := time.NewTimer(t.c.wait(t.getInterval()))
			select {
			case <-done:
				timer.Stop()
				return
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			if !t.incrementalUpdate(ctx) {
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// incrementalUpdate mirrors clientJobTrace.incrementalUpdate; false means
// the job was aborted.
func (t *jobTrace) incrementalUpdate(ctx context.Context) bool {
	p := t.sendPatch(ctx)
	if p.CancelRequested {
		t.cancel()
	}
	switch p.State {
	case PatchSucceeded:
		u := t.touch(ctx)
		if u.CancelRequested {
			t.cancel()
		}
		if u.State == UpdateAbort {
			t.abort()
			return false
		}
	case PatchAbort:
		t.abort()
		return false
	}
	return true
}

// sendPatch mirrors clientJobTrace.sendPatch: the next ≤1 MiB from what the
// server has; nothing is sent when there is nothing new.
func (t *jobTrace) sendPatch(ctx context.Context) PatchResult {
	t.mu.Lock()
	start := t.sent
	end := min(len(t.buf), start+tracePatchLimit)
	var chunk []byte
	if start < end {
		chunk = slices.Clone(t.buf[start:end])
	}
	t.mu.Unlock()
	if len(chunk) == 0 {
		return PatchResult{State: PatchSucceeded, Offset: start}
	}

	res, _ := t.c.PatchTrace(ctx, t.job, start, chunk)
	t.setInterval(res.UpdateInterval)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.patches++
	if res.State == PatchSucceeded || res.State == PatchRangeMismatch {
		t.sent = res.Offset
		t.sentAt = time.Now()
	}
	return res
}

// touch mirrors clientJobTrace.touchJob: PUT running with the log's checksum
// when nothing was sent for forceSendInterval. With no response the runner
// reads UpdateAbort and aborts the job.
func (t *jobTrace) touch(ctx context.Context) UpdateResult {
	t.mu.Lock()
	quiet := time.Since(t.sentAt) > t.c.wait(forceSendInterval)
	t.mu.Unlock()
	if !quiet {
		return UpdateResult{State: UpdateSucceeded}
	}
	sum, size := t.output()
	res, _ := t.c.UpdateJob(ctx, t.job, StateRunning, UpdateOptions{Checksum: sum, Bytesize: size})
	t.setInterval(res.UpdateInterval)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touches++
	if res.State == UpdateSucceeded {
		t.sentAt = time.Now()
	}
	return res
}

// ensureAllTraceSent mirrors clientJobTrace.ensureAllTraceSent: patch until
// the server has the whole log, unless it aborts or forgot the job.
func (t *jobTrace) ensureAllTraceSent(ctx context.Context) {
	for ctx.Err() == nil {
		t.mu.Lock()
		pending := t.sent < len(t.buf)
		t.mu.Unlock()
		// sent > len(buf) (a 416 claiming more than we wrote) would make the
		// runner spin forever; stop instead.
		if !pending {
			return
		}
		switch t.sendPatch(ctx).State {
		case PatchSucceeded:
		case PatchAbort, PatchNotFound:
			return
		default: // range mismatch, failure: wait, then resend from the new offset
			_ = t.c.sleep(ctx, t.getInterval())
		}
	}
}

// finish mirrors clientJobTrace.finalUpdate plus the outer retry: send all
// the log, then the final state, until the server takes it (200) or drops
// the job (403/404/no response). 202 waits the server's interval; 412
// resends the whole log; other codes back off, up to finalUpdateRetryLimit.
func (t *jobTrace) finish(ctx context.Context, base Outcome, result Result, state, reason string, exitCode int) (out Outcome, err error) {
	out = base
	out.Result = result
	out.State = state
	if state == StateFailed {
		out.FailureReason = mapFailureReason(reason, t.job.Features.FailureReasons)
	}
	out.ExitCode = exitCode
	defer func() {
		out.Trace = t.bytes()
		t.mu.Lock()
		out.Patches, out.Touches = t.patches, t.touches
		t.mu.Unlock()
	}()

	// The runner falls back to its default and lets the server raise it.
	t.mu.Lock()
	t.interval = defaultUpdateInterval
	t.mu.Unlock()

	backoff := time.Second
	for failures := 0; ; {
		t.ensureAllTraceSent(ctx)
		if err := ctx.Err(); err != nil {
			return out, err
		}
		sum, size := t.output()
		var res UpdateResult
		res, err = t.c.UpdateJob(ctx, t.job, state, UpdateOptions{
			FailureReason: out.FailureReason,
			ExitCode:      exitCode,
			Checksum:      sum,
			Bytesize:      size,
		})
		out.FinalUpdates++
		out.FinalCode, out.FinalState = res.Code, res.State
		t.setInterval(res.UpdateInterval)

		switch res.State {
		case UpdateSucceeded:
			return out, nil
		case UpdateAbort:
			return out, err // 403/404: gave up quietly; err only if no response
		case UpdateAcceptedButNotCompleted:
			_ = t.c.sleep(ctx, t.getInterval())
		case UpdateTraceValidationFailed:
			t.mu.Lock()
			t.sent = 0
			t.mu.Unlock()
			_ = t.c.sleep(ctx, t.getInterval())
		default:
			failures++
			if failures >= finalUpdateRetryLimit {
				return out, fmt.Errorf("final update of job %d: %d attempts failed, last status %d", t.job.ID, failures, res.Code)
			}
			_ = t.c.sleep(ctx, backoff)
			backoff = min(2*backoff, finalUpdateBackoffMax)
		}
	}
}

// wait applies MaxWait to one of the runner's waits.
func (c *Client) wait(d time.Duration) time.Duration {
	if c.MaxWait > 0 {
		return min(d, c.MaxWait)
	}
	return d
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(c.wait(d))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
