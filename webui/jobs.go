package webui

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/builds/views"
)

// logWindowSize is how much of a log one page shows and one live fetch returns: a few
// thousand lines, a fraction of a second to render whatever the log's size.
const logWindowSize = 256 << 10

// maxChain bounds the retry chain a job page walks (JOBAPI_AUTO_RETRY_MAX and operators'
// retries rarely make more than a handful).
const maxChain = 25

type jobData struct {
	builds.JobView
	PipelineStatus string
	Chain          []chainLink
	Timeline       []timelineStep
	Events         []eventRow
	EventsTotal    int
	Log            logWindow
	LogSize        int64
	LogNav         logNav
	// LiveLog: the window reaches the end of a log that still grows.
	LiveLog   bool
	Artifacts []artifactRow
	// Duration: from its start (views.JobDurations); Queued: its wait for a runner.
	Duration, Queued string
	// AckLeft is what is left of the ack deadline while the job waits.
	AckLeft    *time.Duration
	Cancelable bool
	Retryable  bool
	Playable   bool
	// CanCancel: the user may cancel the job (its force cancel too), whatever its state.
	CanCancel bool
	// The job's own JUnit test report (artifacts:reports:junit), full page only.
	testsView
}

type chainLink struct {
	ID, ProjectID int64
	Attempt       int
	Status        builds.Status
	FailureReason string
	Current       bool
	Look          look
}

type timelineStep struct {
	Name   string
	At     *time.Time
	Detail string
	// Gap is the time since the previous step.
	Gap string
}

type eventRow struct {
	builds.Event
	// By names who caused the event (eventActor).
	By     string
	Detail string
}

type artifactRow struct {
	builds.Artifact
	URL  string // "" when artifacts:access: none
	Size string
}

type logNav struct {
	Start, Earlier, Later, End, Raw string
}

func (u *UI) jobIDs(r *http.Request) (int64, int64, error) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		return 0, 0, err
	}
	id, err := pathInt(r, "job_id")
	return pid, id, err
}

func (u *UI) jobPage(w http.ResponseWriter, r *http.Request) {
	pid, id, err := u.jobIDs(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	ctx := r.Context()
	v, err := u.svc.Job(ctx, pid, id)
	if err == nil {
		v.Artifacts, err = u.arts.Artifacts(ctx, id)
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	// An action shows when the job's state allows it and so do the user's role and the
	// ref's protection; the forms are refused the same way (routes).
	d := jobData{JobView: v, CanCancel: u.allowed(r, pid, access.CancelJob, v.Ref)}
	d.Cancelable = !v.Status.Finished() && d.CanCancel
	d.Playable = v.Status == builds.StatusManual && u.allowed(r, pid, access.PlayJob, v.Ref)
	d.Retryable = v.Status.Finished() && v.RetriedBy == 0 && u.allowed(r, pid, access.RetryJob, v.Ref)
	dur := views.JobDurations(v.Build, u.now())
	d.Duration, d.Queued = optionalDuration(dur.Run), optionalDuration(dur.Queued)
	if v.Status == builds.StatusWaiting && v.AckDeadline != nil {
		left := max(v.AckDeadline.Sub(u.now()), 0)
		d.AckLeft = &left
	}
	if d.Chain, err = u.chain(ctx, v.Build); err != nil {
		u.fail(w, r, err)
		return
	}
	events, total, err := u.svc.Events(ctx, pid, id, builds.Page{Page: 1, PerPage: 100})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d.EventsTotal = total
	for _, e := range events {
		d.Events = append(d.Events, eventRow{Event: e, By: eventActor(e, v.Build), Detail: detailText(withoutActor(e.Detail))})
	}
	d.Timeline = timeline(v.Build, events)
	for _, a := range v.Artifacts {
		row := artifactRow{Artifact: a, Size: sizeText(a.Size)}
		if a.Access != builds.ArtifactAccessNone {
			row.URL = fmt.Sprintf("/projects/%d/jobs/%d/artifacts/%d", pid, id, a.ID)
		}
		d.Artifacts = append(d.Artifacts, row)
	}
	if !wantsFragment(r) && slices.ContainsFunc(v.Artifacts, func(a builds.Artifact) bool { return a.FileType == "junit" }) {
		rep, err := u.arts.JobTestReport(ctx, v.Build)
		if err != nil {
			u.log.WarnContext(ctx, "test report not read for the job page", "build_id", id, "error", err)
		}
		d.testsView = newTestsView(rep, err)
	}
	if !wantsFragment(r) || r.URL.Query().Get("part") != "header" {
		if err := u.logWindowFor(ctx, &d, r); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	page := view{Title: fmt.Sprintf("Job %s #%d", v.Name, v.ID), Nav: "pipelines", Live: fmt.Sprintf("job=%d&pipeline=%d", id, v.PipelineID), Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "job", "header", page)
		return
	}
	u.render(w, r, http.StatusOK, "job", page)
}

// chain lists every attempt of the job, first to last, with why each earlier one ended.
func (u *UI) chain(ctx context.Context, b builds.Build) ([]chainLink, error) {
	if b.RetryOf == 0 && b.RetriedBy == 0 {
		return nil, nil
	}
	link := func(x builds.Build, current bool) chainLink {
		return chainLink{ID: x.ID, ProjectID: x.ProjectID, Attempt: x.Attempt, Status: x.Status, FailureReason: x.FailureReason, Current: current, Look: jobLook(x)}
	}
	before := []chainLink{}
	for prev, n := b.RetryOf, 0; prev != 0 && n < maxChain; n++ {
		v, err := u.svc.Job(ctx, b.ProjectID, prev)
		if err != nil {
			return nil, err
		}
		before = append([]chainLink{link(v.Build, false)}, before...)
		prev = v.RetryOf
	}
	out := append(before, link(b, true))
	for next, n := b.RetriedBy, 0; next != 0 && n < maxChain; n++ {
		v, err := u.svc.Job(ctx, b.ProjectID, next)
		if err != nil {
			return nil, err
		}
		out = append(out, link(v.Build, false))
		next = v.RetriedBy
	}
	return out, nil
}

// timeline is the job's way through two-phase commit, from its events: queued → assigned →
// acknowledged (with the assign-to-ack latency) → running → finished.
func timeline(b builds.Build, events []builds.Event) []timelineStep {
	first := func(types ...string) *builds.Event {
		for i := range events {
			for _, t := range types {
				if events[i].Type == t {
					return &events[i]
				}
			}
		}
		return nil
	}
	var steps []timelineStep
	add := func(name string, at *time.Time, detail string) {
		steps = append(steps, timelineStep{Name: name, At: at, Detail: detail})
	}
	queued := b.QueuedAt
	if e := first(builds.EventQueued); e != nil {
		queued = &e.At
	}
	add("queued", queued, "")
	assigned := b.AssignedAt
	detail := ""
	if e := first(builds.EventAssigned); e != nil {
		assigned = &e.At
		detail = "to " + e.RunnerManager
	}
	add("assigned", assigned, detail)
	if b.TwoPhase {
		if e := first(builds.EventAcknowledged); e != nil {
			d := ""
			if s, ok := e.Detail["assign_to_ack_seconds"].(float64); ok {
				d = "ack latency " + strconv.FormatFloat(s, 'f', 2, 64) + " s"
			}
			add("acknowledged", &e.At, d)
		} else if e := first(builds.EventAckTimeout, builds.EventDeclined); e != nil {
			add(e.Type, &e.At, detailText(e.Detail))
		} else {
			add("acknowledged", nil, "waiting")
		}
	}
	add("running", b.StartedAt, "")
	end := ""
	if b.FailureReason != "" {
		end = b.FailureReason
	}
	add("finished", b.FinishedAt, end)
	var prev *time.Time
	for i := range steps {
		if steps[i].At == nil {
			continue
		}
		if prev != nil {
			steps[i].Gap = "+" + durationText(steps[i].At.Sub(*prev))
			if d := steps[i].At.Sub(*prev); d < time.Second {
				steps[i].Gap = "+" + strconv.FormatInt(d.Milliseconds(), 10) + " ms"
			}
		}
		prev = steps[i].At
	}
	return steps
}

func detailText(d map[string]any) string {
	if len(d) == 0 {
		return ""
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, d[k]))
	}
	return strings.Join(parts, " ")
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// readWindow reads the window of the log that starts at the first line start at or after
// from (its end cut at a line break unless it reaches the log's end), and the log's size.
func (u *UI) readWindow(ctx context.Context, pid, id, from int64) ([]byte, int64, int64, error) {
	read := max(from-1, 0)
	data, size, err := u.logs.TraceRange(ctx, pid, id, read, logWindowSize+1)
	if err != nil {
		return nil, 0, 0, err
	}
	start := read
	if from > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, size, min(from, size), nil
		}
		data, start = data[i+1:], read+int64(i)+1
	}
	if start+int64(len(data)) < size {
		// Not the end: whole lines only, the next window starts where this one ends.
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		}
	}
	return data, size, start, nil
}

func (u *UI) logWindowFor(ctx context.Context, d *jobData, r *http.Request) error {
	pid, id := d.ProjectID, d.ID
	_, size, err := u.logs.TraceRange(ctx, pid, id, 0, 0)
	if err != nil {
		return err
	}
	from := max(size-logWindowSize, 0)
	if v := r.URL.Query().Get("log_from"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			from = min(n, size)
		}
	}
	data, size, start, err := u.readWindow(ctx, pid, id, from)
	if err != nil {
		return err
	}
	firstLine, err := u.lines.count(ctx, u.logs, id, start)
	if err != nil {
		return err
	}
	finished := d.Status.Finished()
	d.Log = renderWindow(data, start, firstLine+1, finished)
	d.LogSize = size
	atEnd := start+int64(len(data)) >= size
	d.LiveLog = atEnd && !finished
	base := fmt.Sprintf("/projects/%d/jobs/%d", pid, id)
	if start > 0 {
		d.LogNav.Start = base + "?log_from=0#log"
		d.LogNav.Earlier = fmt.Sprintf("%s?log_from=%d#log", base, max(start-logWindowSize, 0))
	}
	if !atEnd {
		d.LogNav.Later = fmt.Sprintf("%s?log_from=%d#log", base, d.Log.To)
		d.LogNav.End = base + "#log"
	}
	if size > 0 {
		d.LogNav.Raw = base + "/log/raw"
	}
	if !finished {
		u.watchTrace(ctx, id)
	}
	return nil
}

// watchTrace asks the runner to send its log every few seconds while someone reads it, as
// the trace API does.
func (u *UI) watchTrace(ctx context.Context, id int64) {
	if u.traceWatch == nil {
		return
	}
	if err := u.traceWatch.Watch(ctx, id); err != nil {
		u.log.DebugContext(ctx, "trace watch not recorded", "build_id", id, "error", err)
	}
}

// jobLog answers the live tail: the rendered lines from byte from (a line start the page
// got from its last fetch), numbered from line; the headers say where the next fetch
// starts and whether the log is complete.
func (u *UI) jobLog(w http.ResponseWriter, r *http.Request) {
	pid, id, err := u.jobIDs(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	ctx := r.Context()
	v, err := u.svc.Job(ctx, pid, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	from := queryInt(r, "from", 0)
	data, size, err := u.logs.TraceRange(ctx, pid, id, from, logWindowSize)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	line := queryInt(r, "line", 0)
	if line <= 0 {
		n, err := u.lines.count(ctx, u.logs, id, from)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		line = n + 1
	}
	complete := v.Status.Finished() && from+int64(len(data)) >= size
	if from+int64(len(data)) < size {
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		}
	}
	win := renderWindow(data, from, line, complete)
	if !v.Status.Finished() {
		u.watchTrace(ctx, id)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Log-Next-Offset", strconv.FormatInt(win.To, 10))
	h.Set("X-Log-Next-Line", strconv.FormatInt(line+win.Lines, 10))
	h.Set("X-Log-Size", strconv.FormatInt(size, 10))
	h.Set("X-Log-Complete", strconv.FormatBool(complete && win.To >= size))
	h.Set("X-Job-Status", string(v.Status))
	_, _ = w.Write([]byte(win.HTML))
}

// jobLogRaw streams the whole log as text, from its archive or its live log: a 100 MB log
// never sits in memory.
func (u *UI) jobLogRaw(w http.ResponseWriter, r *http.Request) {
	pid, id, err := u.jobIDs(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	ctx := r.Context()
	trace, err := u.logs.OpenTrace(ctx, pid, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	defer func() { _ = trace.Close() }()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.FormatInt(trace.Size, 10))
	if _, err := io.Copy(w, trace); err != nil && ctx.Err() == nil {
		u.log.WarnContext(ctx, "raw log cut off", "build_id", id, "error", err)
	}
}

func (u *UI) jobArtifactDownload(w http.ResponseWriter, r *http.Request) {
	pid, id, err := u.jobIDs(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	aid, err := pathInt(r, "artifact_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	list, err := u.arts.JobArtifacts(r.Context(), pid, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	for _, a := range list {
		if a.ID != aid {
			continue
		}
		if a.Access == builds.ArtifactAccessNone {
			u.fail(w, r, artifacts.ErrNotAccessible)
			return
		}
		content, err := u.arts.ArtifactContent(r.Context(), a)
		if err != nil {
			u.fail(w, r, err)
			return
		}
		defer content.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": a.Filename}))
		http.ServeContent(w, r, a.Filename, a.CreatedAt, content)
		return
	}
	u.fail(w, r, builds.ErrNotFound)
}

// jobAction is cancel, retry or play from the job or pipeline page; the answer goes back
// to the page the form was on, with what happened.
func (u *UI) jobAction(w http.ResponseWriter, r *http.Request) {
	pid, id, err := u.jobIDs(r)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	var v builds.JobView
	var notice string
	switch action {
	case "cancel":
		cancel := u.svc.CancelJob
		if r.PostFormValue("force") == "true" {
			// The job page's "Force cancel" of a canceling job whose runner is gone.
			cancel = u.svc.ForceCancelJob
		}
		v, err = cancel(r.Context(), pid, id)
		notice = "job_canceled"
		if err == nil && v.Status == builds.StatusCanceling {
			notice = "job_cancel_requested"
		}
	case "retry":
		v, err = u.svc.RetryJob(r.Context(), pid, id)
		notice = "job_retried"
	case "play":
		v, err = u.svc.PlayJob(r.Context(), pid, id)
		notice = "job_started"
	}
	if err != nil {
		u.fail(w, r, err)
		return
	}
	back := fmt.Sprintf("/projects/%d/jobs/%d", pid, v.ID)
	if from := r.PostFormValue("back"); from == "pipeline" {
		back = fmt.Sprintf("/projects/%d/pipelines/%d", pid, v.PipelineID)
	}
	http.Redirect(w, r, withNotice(back, notice), http.StatusSeeOther)
}

// lineCounts remembers how many lines come before an offset of a log. A log only grows,
// so an entry never goes stale; the cache keeps the most recent few.
type lineCounts struct {
	mu    sync.Mutex
	max   int
	order *list.List
	byKey map[[2]int64]*list.Element
}

type lineCount struct {
	key [2]int64
	n   int64
}

func newLineCounts(max int) *lineCounts {
	return &lineCounts{max: max, order: list.New(), byKey: map[[2]int64]*list.Element{}}
}

func (c *lineCounts) count(ctx context.Context, logs *joblogs.Service, id, before int64) (int64, error) {
	if before <= 0 {
		return 0, nil
	}
	key := [2]int64{id, before}
	c.mu.Lock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		n := e.Value.(lineCount).n
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	n, err := logs.TraceLines(ctx, id, before)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; !ok {
		c.byKey[key] = c.order.PushFront(lineCount{key: key, n: n})
		if c.order.Len() > c.max {
			old := c.order.Remove(c.order.Back()).(lineCount)
			delete(c.byKey, old.key)
		}
	}
	return n, nil
}
