package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/junit"
)

// pipelineStatuses are the statuses the list can be filtered by.
var pipelineStatuses = []string{builds.PipelineCreated, builds.PipelinePending, builds.PipelineRunning,
	"manual", "scheduled", builds.PipelineSuccess, builds.PipelineFailed, builds.PipelineCanceled}

const pipelinesPerPage = 30

type pipelinesData struct {
	Filter   views.PipelineFilter
	Project  string // the filter's text, as typed
	Statuses []string
	Table    pipelineTable
	Error    string
}

// pipelineTable is a page of pipelines (template "pipeline_table").
type pipelineTable struct {
	Rows []pipelineRow
	// OneProject: every row is of one project (its page), so no project column.
	OneProject       bool
	Page             int
	PrevURL, NextURL string
	// Empty says why there are no rows.
	Empty string
	Now   time.Time
}

type pipelineRow struct {
	builds.Pipeline
	// Duration is the time its jobs ran, Queued the wait before the first started
	// (views.PipelineDurations); "—" when there is none.
	Duration, Queued string
	// Warnings: passed with warnings; Coverage: the average of its jobs' ("" for none).
	Warnings bool
	Coverage string
}

func (u *UI) pipelinesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := pipelinesData{Statuses: pipelineStatuses, Project: strings.TrimSpace(q.Get("project"))}
	if d.Project != "" {
		id, err := strconv.ParseInt(d.Project, 10, 64)
		if err != nil || id <= 0 {
			d.Error = "Project must be a project id (a positive number)."
		}
		d.Filter.ProjectID = id
	}
	if st := q.Get("status"); st != "" {
		if !slices.Contains(pipelineStatuses, st) {
			d.Error = "Unknown status " + strconv.Quote(st) + "."
		} else {
			d.Filter.Status = st
		}
	}
	status := http.StatusOK
	if d.Error != "" {
		status = http.StatusBadRequest
		d.Table = pipelineTable{Page: 1, Empty: "No pipelines match the filter."}
	} else {
		var err error
		if d.Table, err = u.pipelineTable(r, d.Filter, "/pipelines"); err != nil {
			u.fail(w, r, err)
			return
		}
		if d.Project != "" || d.Filter.Status != "" {
			d.Table.Empty = "No pipelines match the filter."
		}
	}
	v := view{Title: "Pipelines", Nav: "pipelines", Live: "pipelines", Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "pipelines", "rows", v)
		return
	}
	u.render(w, r, status, "pipelines", v)
}

// pipelineTable reads the page of pipelines that ?page= names, for the page at path.
func (u *UI) pipelineTable(r *http.Request, f views.PipelineFilter, path string) (pipelineTable, error) {
	t := pipelineTable{Page: int(max(queryInt(r, "page", 1), 1)), Empty: "No pipelines.", Now: u.now()}
	list, more, err := u.views.Pipelines(r.Context(), f, builds.Page{Page: t.Page, PerPage: pipelinesPerPage})
	if err != nil {
		return t, err
	}
	if t.Rows, err = u.pipelineRows(r, list); err != nil {
		return t, err
	}
	q := r.URL.Query()
	if t.Page > 1 {
		t.PrevURL = pageURL(path, q, t.Page-1)
	}
	if more {
		t.NextURL = pageURL(path, q, t.Page+1)
	}
	return t, nil
}

// pipelineRows are a page of pipelines as lists show them, with their jobs' warnings and
// coverage read in one query.
func (u *UI) pipelineRows(r *http.Request, list []builds.Pipeline) ([]pipelineRow, error) {
	ids := make([]int64, len(list))
	for i, p := range list {
		ids[i] = p.ID
	}
	sums, err := u.views.PipelineSummaries(r.Context(), ids)
	if err != nil {
		return nil, err
	}
	now := u.now()
	rows := make([]pipelineRow, 0, len(list))
	for _, p := range list {
		sum := sums[p.ID]
		dur := views.PipelineDurations(p, now)
		rows = append(rows, pipelineRow{Pipeline: p, Duration: optionalDuration(dur.Run), Queued: optionalDuration(dur.Queued),
			Warnings: sum.Warnings, Coverage: coverageText(sum.Coverage)})
	}
	return rows, nil
}

// pageURL is path with the query q (but the script's fragment=1) on page page.
func pageURL(path string, q url.Values, page int) string {
	c := url.Values{}
	for k, v := range q {
		if k != "fragment" {
			c[k] = v
		}
	}
	c.Set("page", strconv.Itoa(page))
	return path + "?" + c.Encode()
}

// Layout of the pipeline graph: stages are columns of job cards, and needs edges are SVG
// paths from a card's right edge to its dependant's left edge. The layout is computed
// here, so the browser only draws: no script runs for a 2,000-job pipeline to appear.
//
// Cards sit on one grid of rows in every column, so the gaps between rows are free from
// the first column to the last, and the gap between two columns is free from top to
// bottom. An edge runs only there: it never passes under a card it does not connect (a
// straight curve from build to package would cross the test stage's cards and read as
// "unit 1/2 → package").
const (
	cardW    = 232
	cardH    = 58
	cardGapY = 16
	colW     = 296
	colGap   = colW - cardW
	headerH  = 34
	padX     = 8
)

type pipelineData struct {
	builds.Pipeline
	// Duration and Queued as on the list (views.PipelineDurations).
	Duration, Queued string
	Stages           []stageColumn
	Edges            []edge
	Width            int
	Height           int
	// Jobs counts the latest attempts; Attempts all of them.
	Jobs, Attempts int
	Finished       bool
	// CanCancel: the signed-in user may cancel this pipeline's jobs.
	CanCancel bool
	// Warnings: a latest job failed and was allowed to (the pipeline passed with warnings).
	Warnings bool
	// Coverage is the average of the latest jobs' coverage (GitLab's), "" when none has one.
	Coverage string
	// The pipeline's JUnit test report, read for the full page only (a live refresh
	// redraws the graph, not this).
	testsView
	// Exposed are the archives the latest jobs expose (artifacts:expose_as), full page only.
	Exposed []exposedLink
	// History is what was done to the pipeline and by whom (created, canceled, retried),
	// full page only; HistoryTotal counts all of it.
	History      []historyRow
	HistoryTotal int
}

type exposedLink struct {
	Label, Job, URL string // URL "" when artifacts:access: none
	JobID           int64
}

// testsView is the "Tests" section of the pipeline and job pages (template "tests").
type testsView struct {
	// Tests is the JUnit test report; nil when there are no reports.
	Tests *artifacts.TestReport
	// TestsError says the report could not be read (the object store failed).
	TestsError string
	// FailedCases are the report's failed and errored cases, the first maxFailedCases.
	FailedCases []failedCase
}

// maxFailedCases bounds the failures the page lists; the API has them all.
const maxFailedCases = 50

type failedCase struct {
	Suite string
	junit.Case
}

type stageColumn struct {
	Name string
	X    int
	Jobs []jobCard
}

type jobCard struct {
	builds.Build
	X, Y int
	// Child: the child pipeline of a trigger job, 0 before it exists (or when it could not).
	Child int64
	// Earlier is how many earlier attempts it has (its retry chain).
	Earlier                         int
	Playable, Cancelable, Retryable bool
	Needs                           []string
}

// edge is a needs edge from the job From to the job To (build ids: what a test checks the
// path against).
type edge struct {
	Path     string
	From, To int64
}

// buildPipelineData lays out p; children maps its trigger jobs to their child pipelines.
func buildPipelineData(p builds.Pipeline, children map[int64]int64, now time.Time) pipelineData {
	d := pipelineData{Pipeline: p, Attempts: len(p.Builds), Finished: p.FinishedAt != nil}
	dur := views.PipelineDurations(p, now)
	d.Duration, d.Queued = optionalDuration(dur.Run), optionalDuration(dur.Queued)
	d.Warnings = pipelineWarnings(p)
	if c, ok := p.Coverage(); ok {
		d.Coverage = coverageText(&c)
	}
	earlier := map[string]int{}
	latest := map[string]*jobCard{}
	byStage := map[string][]builds.Build{}
	for _, b := range p.Builds {
		if b.RetriedBy != 0 {
			earlier[b.Name]++
			continue
		}
		byStage[b.Stage] = append(byStage[b.Stage], b)
	}
	tallest := 0
	for i, name := range p.Stages {
		col := stageColumn{Name: name, X: padX + i*colW}
		for j, b := range byStage[name] {
			c := jobCard{Build: b, X: col.X, Y: headerH + j*(cardH+cardGapY), Earlier: earlier[b.Name],
				Playable: b.Status == builds.StatusManual, Cancelable: !b.Status.Finished(),
				Retryable: b.Status.Finished() && b.Status != builds.StatusSkipped, Child: children[b.ID]}
			if b.Payload.NeedsDeclared {
				for _, n := range b.Payload.Needs {
					c.Needs = append(c.Needs, n.Job)
				}
			}
			col.Jobs = append(col.Jobs, c)
		}
		tallest = max(tallest, len(col.Jobs))
		d.Stages = append(d.Stages, col)
		d.Jobs += len(col.Jobs)
	}
	for i := range d.Stages {
		for j := range d.Stages[i].Jobs {
			c := &d.Stages[i].Jobs[j]
			latest[c.Name] = c
		}
	}
	for _, col := range d.Stages {
		for _, c := range col.Jobs {
			for _, need := range c.Needs {
				from, ok := latest[need]
				if !ok {
					continue
				}
				d.Edges = append(d.Edges, edge{Path: route(from.X, from.Y, c.X, c.Y, tallest), From: from.ID, To: c.ID})
			}
		}
	}
	d.Width = padX*2 + max(len(p.Stages), 1)*colW
	d.Height = headerH + tallest*(cardH+cardGapY) + cardGapY
	return d
}

// route is the path of a needs edge from the card at (fx, fy) to its dependant's card at
// (tx, ty), in a graph of rows rows. It leaves the first card's right edge and enters the
// second's left edge; every part of it lies in a gap between columns or between rows:
//   - a need within one column loops out into the gap to the column's right;
//   - a need on the next column is one curve across the gap between the two;
//   - a need further left turns, in the gap after its column, into the lane between two
//     rows nearest to both cards, runs along it past the columns in between, and turns
//     back, in the gap before its dependant's column.
//
// A cubic Bézier stays within the box of its four points, so keeping those points in a
// gap keeps the curve there.
func route(fx, fy, tx, ty, rows int) string {
	x1, y1 := fx+cardW, fy+cardH/2
	x2, y2 := tx, ty+cardH/2
	switch {
	case tx <= fx:
		bend := x1 + colGap*5/8
		return fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, bend, y1, bend, y2, tx+cardW, y2)
	case tx-fx <= colW:
		mid := (x1 + x2) / 2
		return fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)
	}
	lane := laneY(nearestLane(y1, y2, rows))
	out, in := x1+colGap/2, x2-colGap/2
	return fmt.Sprintf("M%d %d C%d %d %d %d %d %d L%d %d C%d %d %d %d %d %d",
		x1, y1, out, y1, out, lane, x1+colGap, lane,
		x2-colGap, lane,
		in, lane, in, y2, x2, y2)
}

// laneY is the middle of the gap above row j (j = rows: the gap below the last row).
func laneY(j int) int { return headerH + j*(cardH+cardGapY) - cardGapY/2 }

// nearestLane picks the lane (1 … rows) closest to the middle of the two cards: the lane
// above the first row runs through the stage names, so it is not one.
func nearestLane(y1, y2, rows int) int {
	best, bestDist := 1, -1
	mid := (y1 + y2) / 2
	for j := 1; j <= max(rows, 1); j++ {
		dist := laneY(j) - mid
		if dist < 0 {
			dist = -dist
		}
		if bestDist < 0 || dist < bestDist {
			best, bestDist = j, dist
		}
	}
	return best
}

func (u *UI) pipelinePage(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	id, err := pathInt(r, "pipeline_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	p, err := u.svc.Pipeline(r.Context(), pid, id)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	d := buildPipelineData(p, u.childrenOf(r, p), u.now())
	u.hideRefused(r, &d)
	v := view{Title: fmt.Sprintf("Pipeline #%d", p.ID), Nav: "pipelines", Live: "pipeline=" + strconv.FormatInt(p.ID, 10),
		Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "pipeline", "graph", v)
		return
	}
	v.Data = u.addHistory(r, u.addExposed(r, u.addTests(r, v.Data.(pipelineData))))
	u.render(w, r, http.StatusOK, "pipeline", v)
}

// hideRefused keeps the actions of a pipeline's page to those the signed-in user may take
// on its ref: one decision per action for the whole pipeline, which has one ref.
func (u *UI) hideRefused(r *http.Request, d *pipelineData) {
	d.CanCancel = u.allowed(r, d.ProjectID, access.CancelJob, d.Ref)
	play, retry := u.allowed(r, d.ProjectID, access.PlayJob, d.Ref), u.allowed(r, d.ProjectID, access.RetryJob, d.Ref)
	for i := range d.Stages {
		for j := range d.Stages[i].Jobs {
			c := &d.Stages[i].Jobs[j]
			c.Playable, c.Retryable, c.Cancelable = c.Playable && play, c.Retryable && retry, c.Cancelable && d.CanCancel
		}
	}
}

// addHistory lists who did what to the pipeline; a store that fails costs the list, never
// the page.
func (u *UI) addHistory(r *http.Request, d pipelineData) pipelineData {
	events, total, err := u.audit.PipelineHistory(r.Context(), d.ID, builds.Page{Page: 1, PerPage: 100})
	if err != nil {
		u.log.WarnContext(r.Context(), "history not read for the pipeline page", "pipeline_id", d.ID, "error", err)
		return d
	}
	d.History, d.HistoryTotal = historyRows(events), total
	return d
}

// addExposed lists the exposed artifacts on the pipeline's page; a store that fails costs
// the list, never the page.
func (u *UI) addExposed(r *http.Request, d pipelineData) pipelineData {
	as, err := u.arts.ExposedArtifacts(r.Context(), d.Pipeline)
	if err != nil {
		u.log.WarnContext(r.Context(), "exposed artifacts not read for the pipeline page", "pipeline_id", d.ID, "error", err)
		return d
	}
	names := make(map[int64]string, len(d.Builds))
	for _, b := range d.Builds {
		names[b.ID] = b.Name
	}
	for _, a := range as {
		l := exposedLink{Label: a.ExposeAs, Job: names[a.BuildID], JobID: a.BuildID}
		if a.Access != builds.ArtifactAccessNone {
			l.URL = fmt.Sprintf("/projects/%d/jobs/%d/artifacts/%d", a.ProjectID, a.BuildID, a.ID)
		}
		d.Exposed = append(d.Exposed, l)
	}
	return d
}

// childrenOf maps p's trigger jobs to their child pipelines; read only for a pipeline that
// has trigger jobs, and a store that fails costs the links, never the page.
func (u *UI) childrenOf(r *http.Request, p builds.Pipeline) map[int64]int64 {
	if !slices.ContainsFunc(p.Builds, func(b builds.Build) bool { return b.Bridge }) {
		return nil
	}
	list, err := u.svc.Bridges(r.Context(), p.ProjectID, p.ID)
	if err != nil {
		u.log.WarnContext(r.Context(), "child pipelines not read for the pipeline page", "pipeline_id", p.ID, "error", err)
		return nil
	}
	out := make(map[int64]int64, len(list))
	for _, v := range list {
		if v.Downstream != nil {
			out[v.ID] = v.Downstream.ID
		}
	}
	return out
}

// addTests puts the pipeline's test report on its page; a store that fails costs the
// section, never the page.
func (u *UI) addTests(r *http.Request, d pipelineData) pipelineData {
	rep, err := u.arts.TestReportOf(r.Context(), d.Pipeline)
	if err != nil {
		u.log.WarnContext(r.Context(), "test report not read for the pipeline page", "pipeline_id", d.ID, "error", err)
	}
	d.testsView = newTestsView(rep, err)
	return d
}

// newTestsView is the section for a report read with err.
func newTestsView(rep artifacts.TestReport, err error) testsView {
	var v testsView
	if err != nil {
		v.TestsError = "the test report could not be read just now; reload to try again"
		return v
	}
	if len(rep.Suites) == 0 {
		return v
	}
	v.Tests = &rep
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			if (c.Status == junit.StatusFailed || c.Status == junit.StatusError) && len(v.FailedCases) < maxFailedCases {
				v.FailedCases = append(v.FailedCases, failedCase{Suite: s.Name, Case: c})
			}
		}
	}
	return v
}

func (u *UI) cancelPipeline(w http.ResponseWriter, r *http.Request) {
	pid, err := pathInt(r, "project_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	id, err := pathInt(r, "pipeline_id")
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if _, err := u.svc.CancelPipeline(r.Context(), pid, id); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipelines/%d", pid, id), "pipeline_canceled"), http.StatusSeeOther)
}
