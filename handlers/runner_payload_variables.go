// Runner protocol: the variables of the job that answers POST /jobs/request, in GitLab's
// precedence, with what they say of the project and of CI_SERVER_URL.

package handlers

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

// jobVariables layers the job's variables in GitLab's precedence ("CI/CD variable
// precedence", lowest first): predefined < the job's YAML variables (global ones merged
// under the job's own) < project variables < pipeline variables.
func jobVariables(a builds.Assignment, base string, project jobProjectInfo, refName, refType string, protected bool) *varList {
	b := a.Build
	server := parseServerURL(base)
	var startedAt string
	if b.AssignedAt != nil {
		startedAt = b.AssignedAt.UTC().Format(time.RFC3339)
	}
	tags, _ := json.Marshal(nonNil(a.Runner.Tags))
	shortSHA := b.SHA
	if len(shortSHA) > 8 {
		shortSHA = shortSHA[:8]
	}

	vars := &varList{}
	vars.public("CI", "true")
	vars.public("GITLAB_CI", "true")
	vars.public("CI_SERVER", "yes")
	vars.public("CI_SERVER_URL", server.url)
	vars.public("CI_SERVER_HOST", server.host)
	vars.public("CI_SERVER_PORT", server.port)
	vars.public("CI_SERVER_PROTOCOL", server.protocol)
	vars.public("CI_SERVER_FQDN", server.fqdn)
	vars.public("CI_API_V4_URL", base+"/api/v4")
	vars.public("CI_PROJECT_ID", strconv.FormatInt(b.ProjectID, 10))
	vars.public("CI_PROJECT_NAME", project.name)
	vars.public("CI_PROJECT_PATH", project.fullPath)
	vars.public("CI_PROJECT_PATH_SLUG", gitref.Slug(project.fullPath))
	vars.public("CI_PROJECT_NAMESPACE", projectNamespace)
	vars.public("CI_PROJECT_ROOT_NAMESPACE", projectNamespace)
	vars.public("CI_PROJECT_URL", project.url)
	// CI_PROJECT_DIR is the runner's: it alone knows the build directory, and a value sent
	// here would replace its own (the job's variables come after the runner's defaults).
	vars.public("CI_DEFAULT_BRANCH", project.defaultBranch)
	vars.public("CI_PIPELINE_ID", strconv.FormatInt(b.PipelineID, 10))
	vars.public("CI_PIPELINE_IID", strconv.FormatInt(a.Pipeline.IID, 10))
	vars.public("CI_PIPELINE_SOURCE", a.Pipeline.Source)
	vars.public("CI_PIPELINE_URL", fmt.Sprintf("%s/-/pipelines/%d", project.url, b.PipelineID))
	vars.public("CI_PIPELINE_CREATED_AT", a.Pipeline.CreatedAt.UTC().Format(time.RFC3339))
	vars.public("CI_JOB_ID", strconv.FormatInt(b.ID, 10))
	vars.public("CI_JOB_NAME", b.Name)
	vars.public("CI_JOB_NAME_SLUG", gitref.Slug(b.Name))
	vars.public("CI_JOB_STAGE", b.Stage)
	vars.public("CI_JOB_URL", fmt.Sprintf("%s/-/jobs/%d", project.url, b.ID))
	vars.set(api.JobVariable{Key: "CI_JOB_TOKEN", Value: a.JobToken, Masked: true})
	vars.public("CI_JOB_STARTED_AT", startedAt)
	vars.public("CI_JOB_TIMEOUT", strconv.Itoa(b.TimeoutSeconds))
	vars.public("CI_JOB_ATTEMPT", strconv.Itoa(b.Attempt))
	if b.Payload.NodeTotal > 0 {
		vars.public("CI_NODE_INDEX", strconv.Itoa(b.Payload.NodeIndex))
		vars.public("CI_NODE_TOTAL", strconv.Itoa(b.Payload.NodeTotal))
	}
	vars.public("CI_COMMIT_SHA", b.SHA)
	vars.public("CI_COMMIT_SHORT_SHA", shortSHA)
	vars.public("CI_COMMIT_BEFORE_SHA", a.Pipeline.BeforeSHA)
	vars.public("CI_COMMIT_REF_NAME", refName)
	vars.public("CI_COMMIT_REF_SLUG", gitref.Slug(refName))
	vars.public("CI_COMMIT_REF_PROTECTED", strconv.FormatBool(protected))
	switch {
	case refType == "tag":
		vars.public("CI_COMMIT_TAG", refName)
	case a.Pipeline.Source != builds.SourceMergeRequestEvent: // as GitLab: no branch in a merge request pipeline
		vars.public("CI_COMMIT_BRANCH", refName)
	}
	if env := b.Payload.Environment; env != nil {
		// Expanded when the pipeline was created (ciconfig), as GitLab does.
		vars.public("CI_ENVIRONMENT_NAME", env.Name)
		vars.public("CI_ENVIRONMENT_SLUG", env.Slug)
		if env.URL != "" {
			vars.public("CI_ENVIRONMENT_URL", env.URL)
		}
		vars.public("CI_ENVIRONMENT_ACTION", env.Action)
		vars.public("CI_ENVIRONMENT_TIER", env.Tier)
	}
	vars.public("CI_RUNNER_ID", strconv.FormatInt(b.RunnerID, 10))
	vars.public("CI_RUNNER_DESCRIPTION", a.Runner.Description)
	vars.public("CI_RUNNER_TAGS", string(tags))
	if project.repo == "" {
		// Nothing to clone: a project without a repository (or an implicit one) runs its
		// scripts in an empty directory. A job, project or pipeline variable may still say
		// otherwise.
		vars.public("GIT_STRATEGY", "none")
	}
	for _, v := range b.Payload.Variables {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Public: !v.Masked, Masked: v.Masked, File: v.File, Raw: v.Raw})
	}
	for _, v := range a.Project.JobVariables(b.Protected) {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, // project variables are never public, as in GitLab
			File: v.VariableType == builds.VariableFile})
	}
	for _, v := range a.Pipeline.Variables {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, File: v.File}) // neither public nor masked, as in GitLab
	}
	return vars
}

// varList keeps variables in GitLab's precedence: a later layer replaces an earlier value of
// the same key in place (gitlab-runner would take the last one anyway; one entry per key
// keeps the payload readable).
type varList struct {
	list []api.JobVariable
	at   map[string]int
}

func (l *varList) set(v api.JobVariable) {
	if l.at == nil {
		l.at = make(map[string]int)
	}
	if i, ok := l.at[v.Key]; ok {
		l.list[i] = v
		return
	}
	l.at[v.Key] = len(l.list)
	l.list = append(l.list, v)
}

func (l *varList) public(key, value string) {
	l.set(api.JobVariable{Key: key, Value: value, Public: true})
}

func (l *varList) get(key string) (string, bool) {
	i, ok := l.at[key]
	if !ok {
		return "", false
	}
	return l.list[i].Value, true
}

// jobProjectInfo is what the payload says about the build's project.
type jobProjectInfo struct {
	name, path, fullPath, url, defaultBranch, repo string
}

func projectInfo(a builds.Assignment, base string) jobProjectInfo {
	p := jobProjectInfo{name: fmt.Sprintf("project-%d", a.Build.ProjectID), defaultBranch: "main"}
	p.path = p.name
	if pr := a.Project.Project; pr != nil {
		p.name, p.path, p.defaultBranch, p.repo = pr.Name, pr.Path, pr.DefaultBranch, pr.RepoURL
	}
	p.fullPath = projectNamespace + "/" + p.path
	p.url = base + "/" + p.fullPath
	return p
}

// serverURL is CI_SERVER_URL taken apart as GitLab's CI_SERVER_* variables show it.
type serverURL struct {
	url, protocol, host, port, fqdn string
}

func parseServerURL(base string) serverURL {
	s := serverURL{url: base, protocol: "http", host: base, port: "80"}
	u, err := url.Parse(base)
	if err != nil {
		return s
	}
	s.protocol, s.host = u.Scheme, u.Hostname()
	defaultPort := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	s.port, s.fqdn = u.Port(), s.host
	if s.port == "" {
		s.port = defaultPort
	} else if s.port != defaultPort {
		s.fqdn = u.Host // host:port, an IPv6 address in brackets
	}
	return s
}
