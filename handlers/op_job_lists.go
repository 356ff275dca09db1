package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/listings"
	"github.com/jobapi/jobapi/builds/views"
)

// listProjectJobs is GitLab's GET /projects/:id/jobs: the project's jobs, every attempt,
// newest first, of the states scope[] (or scope) names; paged.
func (h *Handler) listProjectJobs(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	scopes, err := jobScopes(r.URL.Query())
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	if err := h.requireProject(r, pid); err != nil {
		return err
	}
	jobs, total, err := h.lists.ProjectJobs(r.Context(), listings.JobFilter{ProjectID: pid, Statuses: scopes}, pg)
	if err != nil {
		return err
	}
	if err := h.arts.WithArtifacts(r.Context(), jobs); err != nil {
		return err
	}
	out, err := h.jobDetails(r, jobs)
	if err != nil {
		return err
	}
	writePage(w, pg, total, out)
	return nil
}

// jobScopes reads GitLab's scope of a job list: scope[]=a&scope[]=b, scope=a, or scope=a,b.
// Every job state is a scope; an unknown one is a 400 that names it. None: every state.
func jobScopes(q url.Values) ([]builds.Status, error) {
	var out []builds.Status
	for _, key := range []string{"scope[]", "scope"} {
		for _, v := range q[key] {
			for _, name := range strings.Split(v, ",") {
				name = strings.TrimSpace(name)
				if name == "" {
					continue
				}
				st, ok := builds.ParseStatus(name)
				if !ok {
					return nil, badRequest("scope does not have a valid value: %.40q is not one of %s", name, statusNames())
				}
				if !slices.Contains(out, st) {
					out = append(out, st)
				}
			}
		}
	}
	return out, nil
}

// requireProject answers GitLab's 404 for a project that does not exist (no row, and no
// pipelines of an implicit project).
func (h *Handler) requireProject(r *http.Request, pid int64) error {
	ok, err := h.lists.ProjectKnown(r.Context(), pid)
	if err != nil {
		return err
	}
	if !ok {
		return &httpError{code: http.StatusNotFound, msg: "404 Project Not Found"}
	}
	return nil
}

// jobDetails turns job views into GitLab's job objects: jobView's fields with the job's
// links, its pipeline and its runner, read in one query each for the whole list.
func (h *Handler) jobDetails(r *http.Request, jobs []builds.JobView) ([]api.JobDetail, error) {
	ctx := r.Context()
	var pipelineIDs, runnerIDs, projectIDs []int64
	for _, v := range jobs {
		pipelineIDs = append(pipelineIDs, v.PipelineID)
		if v.RunnerID != 0 {
			runnerIDs = append(runnerIDs, v.RunnerID)
		}
		if !slices.Contains(projectIDs, v.ProjectID) {
			projectIDs = append(projectIDs, v.ProjectID)
		}
	}
	paths, err := h.lists.ProjectPaths(ctx, projectIDs)
	if err != nil {
		return nil, err
	}
	base := h.externalBase(r)
	projects := map[int64]string{} // project id → its web URL
	for _, id := range projectIDs {
		projects[id] = projectWebURL(base, id, paths)
	}
	pipelines, err := h.lists.PipelinesByID(ctx, pipelineIDs)
	if err != nil {
		return nil, err
	}
	runners, err := h.lists.RunnersByID(ctx, runnerIDs)
	if err != nil {
		return nil, err
	}
	var keys []commitKey
	for _, p := range pipelines {
		keys = append(keys, commitKey{p.ProjectID, p.SHA})
	}
	commits := h.jobCommits(ctx, keys)
	now := h.svc.Now()
	out := make([]api.JobDetail, len(jobs))
	for i, v := range jobs {
		d := jobView(v)
		projectURL := projects[v.ProjectID]
		d.WebURL = fmt.Sprintf("%s/-/jobs/%d", projectURL, v.ID)
		d.Duration, d.QueuedDuration = seconds(views.JobDurations(v.Build, now))
		if p, ok := pipelines[v.PipelineID]; ok {
			d.Ref, d.Tag = refName(p.Ref)
			d.Pipeline = &api.JobPipeline{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Ref: d.Ref, Sha: p.SHA,
				Status: p.Status, Source: p.Source, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
				WebURL: fmt.Sprintf("%s/-/pipelines/%d", projectURL, p.ID)}
			c, read := commits[commitKey{p.ProjectID, p.SHA}]
			d.Commit = commitView(projectURL, p.SHA, c, read)
			d.User = userView(base, p.CreatedBy)
		}
		if rn, ok := runners[v.RunnerID]; ok {
			lr := listedRunnerView(rn)
			d.Runner = &lr
		}
		out[i] = d
	}
	return out, nil
}

// jobDetail is jobDetails for one job.
func (h *Handler) jobDetail(r *http.Request, v builds.JobView) (api.JobDetail, error) {
	out, err := h.jobDetails(r, []builds.JobView{v})
	if err != nil {
		return api.JobDetail{}, err
	}
	return out[0], nil
}

// projectWebURL is where GitLab would show the project: the base, the namespace and its path
// (project-<id> for an implicit project, which has none in paths), as CI_PROJECT_URL says
// in its jobs.
func projectWebURL(base string, id int64, paths map[int64]string) string {
	path, ok := paths[id]
	if !ok {
		path = fmt.Sprintf("project-%d", id)
	}
	return base + "/" + projectNamespace + "/" + path
}

// refName is GitLab's ref of a job or pipeline: the branch or tag name, and whether a tag.
func refName(ref string) (string, bool) {
	name, kind := splitRef(ref)
	return name, kind == "tag"
}

// writeJob answers with one job in GitLab's shape.
func (h *Handler) writeJob(w http.ResponseWriter, r *http.Request, code int, v builds.JobView) error {
	out, err := h.jobDetail(r, v)
	if err != nil {
		return err
	}
	writeJSON(w, code, out)
	return nil
}

// seconds are GitLab's duration and queued_duration: views.JobDurations in seconds.
func seconds(d views.Durations) (duration, queued *float64) {
	if d.Run != nil {
		s := d.Run.Seconds()
		duration = &s
	}
	if d.Queued != nil {
		s := d.Queued.Seconds()
		queued = &s
	}
	return duration, queued
}
