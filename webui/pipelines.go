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
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/junit"
)

// pipelineStatuses are the statuses the list can be filtered by.
var pipelineStatuses = []string{builds.PipelineCreated, builds.PipelinePending, builds.PipelineRunning,
	"manual", "scheduled", builds.PipelineSuccess, builds.PipelineFailed, builds.PipelineCanceled}

const pipelinesPerPage = 30

type pipelinesData struct {
	Filter   builds.PipelineFilter
	Project  string // the filter's text, as typed
	Statuses []string
	Rows     []pipelineRow
	Page     int
	PrevURL  string
	NextURL  string
	Error    string
}

type pipelineRow struct {
	builds.Pipeline
	Duration string
}

func (u *UI) pipelinesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := pipelinesData{Statuses: pipelineStatuses, Page: int(max(queryInt(r, "page", 1), 1)), Project: strings.TrimSpace(q.Get("project"))}
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
	} else {
		list, more, err := u.svc.Pipelines(r.Context(), d.Filter, builds.Page{Page: d.Page, PerPage: pipelinesPerPage})
		if err != nil {
			u.fail(w, r, err)
			return
		}
		now := u.now()
		for _, p := range list {
			end := now
			if p.FinishedAt != nil {
				end = *p.FinishedAt
			}
			d.Rows = append(d.Rows, pipelineRow{Pipeline: p, Duration: durationText(end.Sub(p.CreatedAt))})
		}
		if d.Page > 1 {
			d.PrevURL = pageURL(q, d.Page-1)
		}
		if more {
			d.NextURL = pageURL(q, d.Page+1)
		}
	}
	v := view{Title: "Pipelines", Nav: "pipelines", Live: "pipelines", Data: d}
	if wantsFragment(r) {
		u.fragment(w, r, "pipelines", "rows", v)
		return
	}
	u.render(w, r, status, "pipelines", v)
}

func pageURL(q url.Values, page int) string {
	c := url.Values{}
	for k, v := range q {
		if k != "fragment" {
			c[k] = v
		}
	}
	c.Set("page", strconv.Itoa(page))
	return "/pipelines?" + c.Encode()
}

// Layout of the pipeline graph: stages are columns of job cards, and needs edges are SVG
// curves from a card's right edge to its dependant's left edge. The layout is computed
// here, so the browser only draws: no script runs for a 2,000-job pipeline to appear.
const (
	cardW    = 232
	cardH    = 58
	cardGapY = 10
	colW     = 296
	headerH  = 34
	padX     = 8
)

type pipelineData struct {
	builds.Pipeline
	Duration string
	Stages   []stageColumn
	Edges    []edge
	Width    int
	Height   int
	// Jobs counts the latest attempts; Attempts all of them.
	Jobs, Attempts int
	Finished       bool
	// The pipeline's JUnit test report, read for the full page only (a live refresh
	// redraws the graph, not this).
	testsView
	// Exposed are the archives the latest jobs expose (artifacts:expose_as), full page only.
	Exposed []exposedLink
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

type edge struct {
	Path string
}

// buildPipelineData lays out p; children maps its trigger jobs to their child pipelines.
func buildPipelineData(p builds.Pipeline, children map[int64]int64, now time.Time) pipelineData {
	d := pipelineData{Pipeline: p, Attempts: len(p.Builds), Finished: p.FinishedAt != nil}
	end := now
	if p.FinishedAt != nil {
		end = *p.FinishedAt
	}
	d.Duration = durationText(end.Sub(p.CreatedAt))
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
				d.Edges = append(d.Edges, edge{Path: curve(from.X+cardW, from.Y+cardH/2, c.X, c.Y+cardH/2)})
			}
		}
	}
	d.Width = padX*2 + max(len(p.Stages), 1)*colW
	d.Height = headerH + tallest*(cardH+cardGapY) + cardGapY
	return d
}

// curve is a cubic Bézier from (x1, y1) to (x2, y2) leaving and entering horizontally; a
// need within one column loops out to the right.
func curve(x1, y1, x2, y2 int) string {
	if x2 <= x1 {
		bend := x1 + 40
		return fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, bend, y1, bend, y2, x2+cardW, y2)
	}
	mid := (x1 + x2) / 2
	return fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)
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
	v := view{Title: fmt.Sprintf("Pipeline #%d", p.ID), Nav: "pipelines", Live: "pipeline=" + strconv.FormatInt(p.ID, 10),
		Data: buildPipelineData(p, u.childrenOf(r, p), u.now())}
	if wantsFragment(r) {
		u.fragment(w, r, "pipeline", "graph", v)
		return
	}
	v.Data = u.addExposed(r, u.addTests(r, v.Data.(pipelineData)))
	u.render(w, r, http.StatusOK, "pipeline", v)
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
	if _, err := u.svc.CancelPipeline(r.Context(), pid, id, actor(r)); err != nil {
		u.fail(w, r, err)
		return
	}
	http.Redirect(w, r, withNotice(fmt.Sprintf("/projects/%d/pipelines/%d", pid, id), "pipeline_canceled"), http.StatusSeeOther)
}
