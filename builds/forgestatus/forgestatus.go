// Package forgestatus reports a pipeline's state to the forge that holds the project's
// repository as a commit status, so that a pull or merge request shows it: GitHub's
// POST /repos/{owner}/{repo}/statuses/{sha}, Gitea's (and Forgejo's) same path under
// /api/v1, GitLab's POST /projects/:id/statuses/:sha. Requests are made by the forges' own
// Go clients (go-github for GitHub and Gitea, whose statuses API is GitHub's in shape;
// GitLab's client-go), over an HTTP client the caller gives (builds/hooks' guarded one).
//
// A project's settings hold a token for the forge: it is written, never shown, and kept
// out of every error this package returns (Mask).
package forgestatus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/go-github/v84/github"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/jobapi/jobapi/builds"
)

// Forge kinds.
const (
	GitHub = "github"
	Gitea  = "gitea"
	GitLab = "gitlab"
)

// DefaultContext names jobapi's statuses on the forge (GitHub's context, GitLab's name).
const DefaultContext = "jobapi/pipeline"

// Settings say where a project's commit statuses go.
type Settings struct {
	ProjectID int64
	Forge     string
	// APIURL is the forge's API root: https://api.github.com (or https://host/api/v3),
	// https://gitea.example.com/api/v1, https://gitlab.example.com/api/v4.
	APIURL string
	// Repository is owner/name on GitHub and Gitea; the project's id or full path on GitLab.
	Repository string
	Token      string
	Context    string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Change sets a project's settings; nil fields keep their value (on the first PUT: the
// defaults, the API root of github.com or gitlab.com, the context jobapi/pipeline).
type Change struct {
	Forge      *string
	APIURL     *string
	Repository *string
	Token      *string
	Context    *string
}

var defaultAPI = map[string]string{GitHub: "https://api.github.com", GitLab: "https://gitlab.com/api/v4"}

// Apply sets c's fields on s and checks the result.
func (c Change) Apply(s *Settings) error {
	for _, f := range []struct {
		dst *string
		v   *string
	}{{&s.Forge, c.Forge}, {&s.APIURL, c.APIURL}, {&s.Repository, c.Repository}, {&s.Token, c.Token}, {&s.Context, c.Context}} {
		if f.v != nil {
			*f.dst = strings.TrimSpace(*f.v)
		}
	}
	switch s.Forge {
	case GitHub, Gitea, GitLab:
	case "":
		return &builds.ValidationError{Msg: "forge is missing: github, gitea or gitlab"}
	default:
		return &builds.ValidationError{Msg: fmt.Sprintf("forge does not have a valid value: %.40q is not one of github, gitea, gitlab", s.Forge)}
	}
	if s.APIURL == "" {
		s.APIURL = defaultAPI[s.Forge]
	}
	if s.Context == "" {
		s.Context = DefaultContext
	}
	s.APIURL = strings.TrimRight(s.APIURL, "/")
	u, err := url.Parse(s.APIURL)
	if s.APIURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return &builds.ValidationError{Msg: "api_url must be the forge's API root, an http(s) URL without credentials (gitea has no default)"}
	}
	if s.Token == "" {
		return &builds.ValidationError{Msg: "token is missing: the forge's access token that may write commit statuses"}
	}
	for name, v := range map[string]string{"api_url": s.APIURL, "repository": s.Repository, "token": s.Token, "context": s.Context} {
		if !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\r\n") || len(v) > 1024 {
			return &builds.ValidationError{Msg: name + " must be one line of UTF-8 text, at most 1024 bytes"}
		}
	}
	switch {
	case s.Repository == "":
		return &builds.ValidationError{Msg: "repository is missing: owner/name on GitHub and Gitea, the project's id or path on GitLab"}
	case s.Forge != GitLab && len(strings.Split(s.Repository, "/")) != 2:
		return &builds.ValidationError{Msg: "repository must be owner/name on " + s.Forge}
	case strings.Contains(s.Repository, ".."):
		return &builds.ValidationError{Msg: "repository must not contain .."}
	}
	return nil
}

// Status is one commit status: the pipeline's state at a commit.
type Status struct {
	SHA         string `json:"sha"`
	Ref         string `json:"ref"`
	State       string `json:"state"` // the pipeline's: pending, running, success, failed, canceled
	TargetURL   string `json:"target_url"`
	Description string `json:"description"`
	PipelineID  int64  `json:"pipeline_id"`
}

// Describe is the description a status carries for a pipeline state.
func Describe(state string) string {
	switch state {
	case builds.PipelineSuccess:
		return "The pipeline passed on jobapi"
	case builds.PipelineFailed:
		return "The pipeline failed on jobapi"
	case builds.PipelineCanceled:
		return "The pipeline was canceled on jobapi"
	case builds.PipelineRunning:
		return "The pipeline is running on jobapi"
	}
	return "The pipeline is waiting on jobapi"
}

// Reported says whether a pipeline state is sent to forges: created pipelines are not yet
// anything a reviewer waits for; manual and scheduled ones wait like pending ones.
func Reported(state string) bool {
	switch state {
	case builds.PipelinePending, builds.PipelineRunning, builds.PipelineSuccess, builds.PipelineFailed, builds.PipelineCanceled:
		return true
	}
	return false
}

// githubState is GitHub's and Gitea's state of a pipeline state: they have pending,
// success, failure and error; a running pipeline is pending there, a canceled one an error.
func githubState(state string) string {
	switch state {
	case builds.PipelineSuccess:
		return "success"
	case builds.PipelineFailed:
		return "failure"
	case builds.PipelineCanceled:
		return "error"
	}
	return "pending"
}

// Endpoint is where a status is posted, for the delivery log (no token in it).
func Endpoint(s Settings, sha string) string {
	switch s.Forge {
	case GitLab:
		return fmt.Sprintf("%s/projects/%s/statuses/%s", s.APIURL, url.PathEscape(s.Repository), sha)
	}
	return fmt.Sprintf("%s/repos/%s/statuses/%s", s.APIURL, s.Repository, sha)
}

// Result is the forge's answer to a post: its status code (0: none came) and its body.
type Result struct {
	StatusCode int
	Body       string
}

// Post sends st to the forge of s through client; a non-2xx answer is an error with the
// code in Result. The token never appears in the error.
func Post(ctx context.Context, client *http.Client, s Settings, st Status) (Result, error) {
	var res Result
	var err error
	switch s.Forge {
	case GitHub, Gitea:
		res, err = postGitHub(ctx, client, s, st)
	case GitLab:
		res, err = postGitLab(ctx, client, s, st)
	default:
		err = fmt.Errorf("unknown forge %q", s.Forge)
	}
	if err != nil {
		return res, errors.New(Mask(err.Error(), s.Token))
	}
	return res, nil
}

// Mask replaces every occurrence of token in text.
func Mask(text, token string) string {
	if token == "" {
		return text
	}
	return strings.ReplaceAll(text, token, "[MASKED]")
}

// giteaAuth sends Gitea's documented "Authorization: token …" instead of go-github's Bearer.
type giteaAuth struct {
	token string
	next  http.RoundTripper
}

func (a giteaAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "token "+a.token)
	return a.next.RoundTrip(r)
}

func postGitHub(ctx context.Context, client *http.Client, s Settings, st Status) (Result, error) {
	owner, repo, _ := strings.Cut(s.Repository, "/")
	var gh *github.Client
	if s.Forge == Gitea {
		next := client.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		c := *client
		c.Transport = giteaAuth{token: s.Token, next: next}
		gh = github.NewClient(&c)
	} else {
		gh = github.NewClient(client).WithAuthToken(s.Token)
	}
	base, err := url.Parse(s.APIURL + "/")
	if err != nil {
		return Result{}, err
	}
	gh.BaseURL = base
	state := githubState(st.State)
	_, resp, err := gh.Repositories.CreateStatus(ctx, owner, repo, st.SHA, github.RepoStatus{State: &state,
		TargetURL: &st.TargetURL, Description: &st.Description, Context: &s.Context})
	var hr *http.Response
	if resp != nil {
		hr = resp.Response
	}
	return resultOf(hr, err)
}

func postGitLab(ctx context.Context, client *http.Client, s Settings, st Status) (Result, error) {
	gl, err := gitlab.NewClient(s.Token, gitlab.WithBaseURL(s.APIURL), gitlab.WithHTTPClient(client), gitlab.WithoutRetries())
	if err != nil {
		return Result{}, err
	}
	state := gitlab.BuildStateValue(st.State)
	opt := &gitlab.SetCommitStatusOptions{State: state, Name: &s.Context, TargetURL: &st.TargetURL, Description: &st.Description}
	if st.Ref != "" {
		opt.Ref = &st.Ref
	}
	_, resp, err := gl.Commits.SetCommitStatus(s.Repository, st.SHA, opt, gitlab.WithContext(ctx))
	var hr *http.Response
	if resp != nil {
		hr = resp.Response
	}
	return resultOf(hr, err)
}

// resultOf reads the answer the clients leave (their body is consumed; their errors carry
// its message).
func resultOf(resp *http.Response, err error) (Result, error) {
	var res Result
	if resp != nil {
		res.StatusCode = resp.StatusCode
	}
	if err != nil {
		res.Body = err.Error()
		return res, err
	}
	return res, nil
}
