package ciconfig

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// Origin is what a new pipeline's Context is made of: the HTTP handlers' POST …/pipeline
// and the bridge pass (a child pipeline) both describe their pipeline with it, so that
// rules see the same variables whichever way a pipeline is created.
type Origin struct {
	ProjectID int64
	Project   builds.JobProject
	Ref       string // "main", "refs/heads/main" or "refs/tags/v1"; "" is the default branch
	SHA       string
	BeforeSHA string // the ref's previous tip (push pipelines): rules:changes compares with it
	Source    string // "" is api
	ServerURL string // CI_SERVER_URL: jobapi's external address
	Namespace string // the project's namespace (CI_PROJECT_NAMESPACE)
	// Variables: the pipeline's own, after the project's (they win).
	Variables []builds.Variable
}

// RefName is the ref's name and whether it is a tag, with the default branch for "".
func (o Origin) RefName() (name string, tag bool) {
	ref := o.Ref
	if ref == "" {
		ref = "main"
		if o.Project.Project != nil {
			ref = o.Project.Project.DefaultBranch
		}
	}
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return t, true
	}
	return strings.TrimPrefix(ref, "refs/heads/"), false
}

// Context is what rules and workflow:rules of a pipeline of o see (Includes not set).
func (o Origin) Context() Context {
	name, tag := o.RefName()
	source := o.Source
	if source == "" {
		source = "api"
	}
	// Protected as the store will decide it when it creates the pipeline (its ref's name
	// for "": the default branch).
	protected := o.Project.RefProtected(o.refForVariables())
	c := Context{Ref: name, RefIsTag: tag, SHA: o.SHA, BeforeSHA: o.BeforeSHA, DefaultBranch: "main", Source: source}
	projectName := "project-" + strconv.FormatInt(o.ProjectID, 10)
	path := projectName
	if p := o.Project.Project; p != nil {
		c.DefaultBranch, projectName, path = p.DefaultBranch, p.Name, p.Path
	}
	host := o.ServerURL
	if u, err := url.Parse(o.ServerURL); err == nil {
		host = u.Hostname()
	}
	predefined := [][2]string{
		{"CI", "true"}, {"GITLAB_CI", "true"},
		{"CI_SERVER_URL", o.ServerURL}, {"CI_SERVER_HOST", host}, {"CI_API_V4_URL", o.ServerURL + "/api/v4"},
		{"CI_PROJECT_ID", strconv.FormatInt(o.ProjectID, 10)}, {"CI_PROJECT_NAME", projectName},
		{"CI_PROJECT_PATH", o.Namespace + "/" + path}, {"CI_PROJECT_NAMESPACE", o.Namespace},
		{"CI_COMMIT_REF_PROTECTED", strconv.FormatBool(protected)},
	}
	for _, p := range predefined {
		c.Variables = append(c.Variables, builds.Variable{Key: p[0], Value: p[1]})
	}
	for _, v := range o.Project.JobVariables(protected) {
		c.Variables = append(c.Variables, builds.Variable{Key: v.Key, Value: v.Value, Masked: v.Masked,
			File: v.VariableType == builds.VariableFile})
	}
	// Pipeline variables last: they win over project variables, as in the job.
	c.Variables = append(c.Variables, o.Variables...)
	return c
}

func (o Origin) refForVariables() string {
	if o.Ref != "" {
		return o.Ref
	}
	name, _ := o.RefName()
	return name
}
