package hooks

import (
	"fmt"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/views"
	"github.com/jobapi/jobapi/gitremote"
)

// The payloads below are GitLab's webhook events (docs: user/project/integrations/
// webhook_events), field for field where jobapi knows the value. What it does not keep is
// left empty or null rather than made up: a commit's message and author (jobapi knows a
// commit by its id), merge requests, avatars. The tests read every payload with GitLab's own Go client
// (client-go's ParseWebhook).

// gitlabTime is the time format of GitLab's pipeline and job hooks ("2016-08-12 15:23:28 UTC").
const gitlabTime = "2006-01-02 15:04:05 MST"

func hookTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(gitlabTime)
	return &s
}

func isoTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}

func seconds(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	s := d.Seconds()
	return &s
}

// Site is what payloads link to: jobapi's base URL (X-Gitlab-Instance, web_url) and the
// namespace of its projects (path_with_namespace).
type Site struct {
	BaseURL   string
	Namespace string
}

func (s Site) projectURL(p builds.Project) string {
	return fmt.Sprintf("%s/projects/%d", s.BaseURL, p.ID)
}

// PipelineURL is jobapi's page of a pipeline (the web UI), the target_url of statuses.
func (s Site) PipelineURL(p builds.Pipeline) string {
	return fmt.Sprintf("%s/projects/%d/pipelines/%d", s.BaseURL, p.ProjectID, p.ID)
}

func (s Site) jobURL(b builds.Build) string {
	return fmt.Sprintf("%s/projects/%d/jobs/%d", s.BaseURL, b.ProjectID, b.ID)
}

// projectPayload is GitLab's project object of pipeline and push events.
type projectPayload struct {
	ID                int64   `json:"id"`
	Name              string  `json:"name"`
	Description       string  `json:"description"`
	WebURL            string  `json:"web_url"`
	AvatarURL         *string `json:"avatar_url"`
	GitSSHURL         string  `json:"git_ssh_url"`
	GitHTTPURL        string  `json:"git_http_url"`
	Namespace         string  `json:"namespace"`
	VisibilityLevel   int     `json:"visibility_level"`
	PathWithNamespace string  `json:"path_with_namespace"`
	DefaultBranch     string  `json:"default_branch"`
	CIConfigPath      string  `json:"ci_config_path"`
	Homepage          string  `json:"homepage"`
	URL               string  `json:"url"`
	HTTPURL           string  `json:"http_url"`
}

func (s Site) project(p builds.Project) projectPayload {
	remote := gitremote.Redact(p.RepoURL)
	return projectPayload{ID: p.ID, Name: p.Name, WebURL: s.projectURL(p), GitHTTPURL: remote, Namespace: s.Namespace,
		PathWithNamespace: s.Namespace + "/" + p.Path, DefaultBranch: p.DefaultBranch, CIConfigPath: p.CIConfigPath,
		Homepage: s.projectURL(p), URL: remote, HTTPURL: remote}
}

// commitPayload is the commit of a pipeline event: jobapi knows its id only.
type commitPayload struct {
	ID        string       `json:"id"`
	Message   string       `json:"message"`
	Title     string       `json:"title"`
	Timestamp *string      `json:"timestamp"`
	URL       string       `json:"url"`
	Author    authorOfNone `json:"author"`
}

type authorOfNone struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// hookStatus is a job's status as GitLab names it: a job a runner holds before its ack
// (jobapi's two-phase commit) is still pending to GitLab's eyes.
func hookStatus(s builds.Status) string {
	if s == builds.StatusWaiting {
		return string(builds.StatusPending)
	}
	return string(s)
}

// refAndTag splits a pipeline's ref into GitLab's ref (the short name) and tag flag.
func refAndTag(ref string) (string, bool) {
	if r, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return r, true
	}
	return strings.TrimPrefix(ref, "refs/heads/"), false
}

type runnerPayload struct {
	ID          int64    `json:"id"`
	Description string   `json:"description"`
	RunnerType  string   `json:"runner_type"`
	Active      bool     `json:"active"`
	IsShared    bool     `json:"is_shared"`
	Tags        []string `json:"tags"`
}

func runnerOf(b builds.Build) *runnerPayload {
	if b.RunnerID == 0 {
		return nil
	}
	return &runnerPayload{ID: b.RunnerID, RunnerType: "instance_type", Active: true, IsShared: true, Tags: nonNil(b.Tags)}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type pipelineBuild struct {
	ID             int64          `json:"id"`
	Stage          string         `json:"stage"`
	Name           string         `json:"name"`
	Status         string         `json:"status"`
	CreatedAt      *string        `json:"created_at"`
	StartedAt      *string        `json:"started_at"`
	FinishedAt     *string        `json:"finished_at"`
	Duration       *float64       `json:"duration"`
	QueuedDuration *float64       `json:"queued_duration"`
	FailureReason  *string        `json:"failure_reason"`
	When           string         `json:"when"`
	Manual         bool           `json:"manual"`
	AllowFailure   bool           `json:"allow_failure"`
	User           *hookUser      `json:"user"`
	Runner         *runnerPayload `json:"runner"`
	ArtifactsFile  artifactsFile  `json:"artifacts_file"`
	Environment    *struct{}      `json:"environment"`
}

// hookUser is GitLab's user in hook payloads: who created the pipeline (for a job, GitLab
// names the user of the job, which in jobapi is its pipeline's). GitLab has redacted the
// email there since 16.0; jobapi keeps no avatars. Machinery that creates pipelines
// (triggers, schedules, pushes) is a bot named after its kind, as the pipeline API shows it.
type hookUser struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Username  string `json:"username"`
	AvatarURL string `json:"avatar_url"`
	Email     string `json:"email"`
}

func userOf(u *builds.PipelineUser) *hookUser {
	if u == nil {
		return nil // a pipeline created before jobapi kept its creator
	}
	out := &hookUser{Username: u.Username, Name: u.Username, Email: "[REDACTED]"}
	switch u.Kind {
	case builds.ActorAdminToken:
		out.ID, out.Username, out.Name = builds.AdminUserID, builds.AdminUsername, builds.AdminName
	case builds.ActorUser:
		out.ID = u.UserID
		if u.Name != "" {
			out.Name = u.Name
		}
	}
	return out
}

type artifactsFile struct {
	Filename *string `json:"filename"`
	Size     *int64  `json:"size"`
}

type pipelineAttributes struct {
	ID             int64             `json:"id"`
	IID            int64             `json:"iid"`
	Name           *string           `json:"name"`
	Ref            string            `json:"ref"`
	Tag            bool              `json:"tag"`
	SHA            string            `json:"sha"`
	BeforeSHA      string            `json:"before_sha"`
	Source         string            `json:"source"`
	Status         string            `json:"status"`
	DetailedStatus string            `json:"detailed_status"`
	Stages         []string          `json:"stages"`
	CreatedAt      *string           `json:"created_at"`
	FinishedAt     *string           `json:"finished_at"`
	Duration       *float64          `json:"duration"`
	QueuedDuration *float64          `json:"queued_duration"`
	URL            string            `json:"url"`
	Variables      []variablePayload `json:"variables"`
}

type variablePayload struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// PipelineEvent is GitLab's Pipeline Hook payload.
type PipelineEvent struct {
	ObjectKind       string             `json:"object_kind"`
	ObjectAttributes pipelineAttributes `json:"object_attributes"`
	MergeRequest     *struct{}          `json:"merge_request"`
	User             *hookUser          `json:"user"`
	Project          projectPayload     `json:"project"`
	Commit           commitPayload      `json:"commit"`
	SourcePipeline   *sourcePipeline    `json:"source_pipeline,omitempty"`
	Builds           []pipelineBuild    `json:"builds"`
}

type sourcePipeline struct {
	Project struct {
		ID int64 `json:"id"`
	} `json:"project"`
	JobID      int64 `json:"job_id"`
	PipelineID int64 `json:"pipeline_id"`
}

// detailedStatus is GitLab's detailed_status text of a pipeline status.
var detailedStatus = map[string]string{"created": "created", "pending": "pending", "running": "running",
	"success": "passed", "failed": "failed", "canceled": "canceled", "skipped": "skipped", "manual": "manual",
	"scheduled": "scheduled"}

// pipelineEvent builds the Pipeline Hook of p (with its builds) now.
func (s Site) pipelineEvent(p builds.Pipeline, prj builds.Project, now time.Time) PipelineEvent {
	ref, tag := refAndTag(p.Ref)
	d := views.PipelineDurations(p, now)
	var dur *float64
	if d.Run != nil {
		v := float64(int64(d.Run.Seconds()))
		dur = &v
	}
	vars := make([]variablePayload, 0, len(p.Variables))
	for _, v := range p.Variables {
		vars = append(vars, variablePayload{Key: v.Key, Value: v.Value})
	}
	ev := PipelineEvent{ObjectKind: "pipeline",
		ObjectAttributes: pipelineAttributes{ID: p.ID, IID: p.IID, Ref: ref, Tag: tag, SHA: p.SHA, BeforeSHA: p.BeforeSHA,
			Source: p.Source, Status: p.Status, DetailedStatus: detailedStatus[p.Status], Stages: nonNil(p.Stages),
			CreatedAt: hookTime(&p.CreatedAt), FinishedAt: hookTime(p.FinishedAt), Duration: dur,
			QueuedDuration: seconds(d.Queued), URL: s.PipelineURL(p), Variables: vars},
		Project: s.project(prj),
		Commit:  commitPayload{ID: p.SHA, URL: s.PipelineURL(p)},
		User:    userOf(p.CreatedBy),
		Builds:  []pipelineBuild{},
	}
	if p.ParentPipelineID != 0 {
		ev.SourcePipeline = &sourcePipeline{JobID: p.ParentBuildID, PipelineID: p.ParentPipelineID}
		ev.SourcePipeline.Project.ID = p.ProjectID
	}
	for _, b := range p.Builds {
		if b.RetriedBy != 0 || b.Bridge {
			continue // GitLab lists the latest attempts of jobs, not bridges
		}
		jd := views.JobDurations(b, now)
		var reason *string
		if b.FailureReason != "" {
			reason = &b.FailureReason
		}
		when := b.Payload.When
		if when == "" {
			when = "on_success"
		}
		ev.Builds = append(ev.Builds, pipelineBuild{ID: b.ID, Stage: b.Stage, Name: b.Name, Status: hookStatus(b.Status),
			CreatedAt: hookTime(&b.CreatedAt), StartedAt: hookTime(b.StartedAt), FinishedAt: hookTime(b.FinishedAt),
			Duration: seconds(jd.Run), QueuedDuration: seconds(jd.Queued), FailureReason: reason, When: when,
			Manual: when == "manual", AllowFailure: b.AllowFailure, Runner: runnerOf(b), User: ev.User})
	}
	return ev
}

// JobEvent is GitLab's Job Hook payload (object_kind "build").
type JobEvent struct {
	ObjectKind          string         `json:"object_kind"`
	Ref                 string         `json:"ref"`
	Tag                 bool           `json:"tag"`
	BeforeSHA           string         `json:"before_sha"`
	SHA                 string         `json:"sha"`
	RetriesCount        int            `json:"retries_count"`
	BuildID             int64          `json:"build_id"`
	BuildName           string         `json:"build_name"`
	BuildStage          string         `json:"build_stage"`
	BuildStatus         string         `json:"build_status"`
	BuildCreatedAt      *string        `json:"build_created_at"`
	BuildStartedAt      *string        `json:"build_started_at"`
	BuildFinishedAt     *string        `json:"build_finished_at"`
	BuildCreatedAtISO   *string        `json:"build_created_at_iso"`
	BuildStartedAtISO   *string        `json:"build_started_at_iso"`
	BuildFinishedAtISO  *string        `json:"build_finished_at_iso"`
	BuildDuration       *float64       `json:"build_duration"`
	BuildQueuedDuration *float64       `json:"build_queued_duration"`
	BuildAllowFailure   bool           `json:"build_allow_failure"`
	BuildFailureReason  string         `json:"build_failure_reason"`
	PipelineID          int64          `json:"pipeline_id"`
	Runner              *runnerPayload `json:"runner"`
	ProjectID           int64          `json:"project_id"`
	ProjectName         string         `json:"project_name"`
	User                *hookUser      `json:"user"`
	Commit              jobCommit      `json:"commit"`
	Repository          repository     `json:"repository"`
	Project             projectPayload `json:"project"`
	Environment         *struct{}      `json:"environment"`
	URL                 string         `json:"url"`
}

type jobCommit struct {
	ID          int64   `json:"id"` // the pipeline's id, as GitLab's job hook has it
	Name        *string `json:"name"`
	SHA         string  `json:"sha"`
	Message     string  `json:"message"`
	AuthorName  string  `json:"author_name"`
	AuthorEmail string  `json:"author_email"`
	AuthorURL   string  `json:"author_url"`
	Status      string  `json:"status"`
	Duration    *int64  `json:"duration"`
	StartedAt   *string `json:"started_at"`
	FinishedAt  *string `json:"finished_at"`
}

type repository struct {
	Name        string `json:"name"`
	URL         string `json:"url"`
	Description string `json:"description"`
	Homepage    string `json:"homepage"`
	GitHTTPURL  string `json:"git_http_url"`
	GitSSHURL   string `json:"git_ssh_url"`
	Visibility  int    `json:"visibility_level"`
}

func (s Site) repository(prj builds.Project) repository {
	remote := gitremote.Redact(prj.RepoURL)
	return repository{Name: prj.Name, URL: remote, Homepage: s.projectURL(prj), GitHTTPURL: remote}
}

// jobEvent builds the Job Hook of build b of pipeline p now.
func (s Site) jobEvent(b builds.Build, p builds.Pipeline, prj builds.Project, now time.Time) JobEvent {
	ref, tag := refAndTag(p.Ref)
	jd := views.JobDurations(b, now)
	pd := views.PipelineDurations(p, now)
	var pdur *int64
	if pd.Run != nil {
		v := int64(pd.Run.Seconds())
		pdur = &v
	}
	var pstarted *time.Time
	if runs := views.RunsOf(p); runs.FirstStarted != nil {
		pstarted = runs.FirstStarted
	}
	return JobEvent{ObjectKind: "build", Ref: ref, Tag: tag, BeforeSHA: p.BeforeSHA, SHA: p.SHA, RetriesCount: b.Attempt - 1,
		BuildID: b.ID, BuildName: b.Name, BuildStage: b.Stage, BuildStatus: hookStatus(b.Status),
		BuildCreatedAt: hookTime(&b.CreatedAt), BuildStartedAt: hookTime(b.StartedAt), BuildFinishedAt: hookTime(b.FinishedAt),
		BuildCreatedAtISO: isoTime(&b.CreatedAt), BuildStartedAtISO: isoTime(b.StartedAt), BuildFinishedAtISO: isoTime(b.FinishedAt),
		BuildDuration: seconds(jd.Run), BuildQueuedDuration: seconds(jd.Queued), BuildAllowFailure: b.AllowFailure,
		BuildFailureReason: failureReasonOrUnknown(b), PipelineID: p.ID, Runner: runnerOf(b), ProjectID: prj.ID,
		ProjectName: s.Namespace + " / " + prj.Name, User: userOf(p.CreatedBy),
		Commit: jobCommit{ID: p.ID, SHA: p.SHA, Status: p.Status, Duration: pdur, StartedAt: hookTime(pstarted),
			FinishedAt: hookTime(p.FinishedAt)},
		Repository: s.repository(prj), Project: s.project(prj), URL: s.jobURL(b)}
}

// failureReasonOrUnknown is GitLab's build_failure_reason: "unknown_failure" for a job that
// failed without a reason, and the same text for jobs that did not fail.
func failureReasonOrUnknown(b builds.Build) string {
	if b.FailureReason != "" {
		return b.FailureReason
	}
	return "unknown_failure"
}

// PushEvent is GitLab's Push Hook and Tag Push Hook payload.
type PushEvent struct {
	ObjectKind        string         `json:"object_kind"`
	EventName         string         `json:"event_name"`
	Before            string         `json:"before"`
	After             string         `json:"after"`
	Ref               string         `json:"ref"`
	RefProtected      bool           `json:"ref_protected"`
	CheckoutSHA       string         `json:"checkout_sha"`
	Message           *string        `json:"message"`
	UserID            *int64         `json:"user_id"`
	UserName          string         `json:"user_name"`
	UserUsername      string         `json:"user_username"`
	UserEmail         *string        `json:"user_email"`
	UserAvatar        *string        `json:"user_avatar"`
	ProjectID         int64          `json:"project_id"`
	Project           projectPayload `json:"project"`
	Commits           []pushCommit   `json:"commits"`
	TotalCommitsCount int            `json:"total_commits_count"`
	Repository        repository     `json:"repository"`
}

type pushCommit struct {
	ID        string       `json:"id"`
	Message   string       `json:"message"`
	Title     string       `json:"title"`
	Timestamp *string      `json:"timestamp"`
	URL       string       `json:"url"`
	Author    authorOfNone `json:"author"`
	Added     []string     `json:"added"`
	Modified  []string     `json:"modified"`
	Removed   []string     `json:"removed"`
}

// pushEvent builds the Push Hook (or Tag Push Hook) of the push that started pipeline p.
// jobapi knows the push's ref, before and after: its commits list holds the head commit,
// known by its id.
func (s Site) pushEvent(p builds.Pipeline, prj builds.Project) (string, PushEvent) {
	full := p.Ref
	if !strings.HasPrefix(full, "refs/") {
		full = "refs/heads/" + full
	}
	kind, event := "push", EventPush
	if strings.HasPrefix(full, "refs/tags/") {
		kind, event = "tag_push", EventTagPush
	}
	before := p.BeforeSHA
	if before == "" {
		before = strings.Repeat("0", 40)
	}
	return event, PushEvent{ObjectKind: kind, EventName: kind, Before: before, After: p.SHA, Ref: full,
		RefProtected: len(p.Builds) > 0 && p.Builds[0].Protected, CheckoutSHA: p.SHA, ProjectID: prj.ID,
		Project: s.project(prj), Repository: s.repository(prj),
		Commits:           []pushCommit{{ID: p.SHA, URL: s.PipelineURL(p), Added: []string{}, Modified: []string{}, Removed: []string{}}},
		TotalCommitsCount: 1}
}
