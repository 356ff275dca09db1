package pushes

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-github/v84/github"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/gitref"
)

// Events are parsed by the forges' own Go clients: go-github for GitHub and for Gitea,
// whose push and pull_request payloads are GitHub's in shape (Gitea documents them so), and
// GitLab's client-go for GitLab. What a pipeline needs is read out of them into event.

// kind is what an event asks for.
type kind int

const (
	ignored      kind = iota // nothing to build (Reason says why)
	push                     // a branch or tag pushed: a push pipeline
	mergeRequest             // a merge request opened or updated: a merge_request_event pipeline
)

// event is what jobapi needs of a webhook.
type event struct {
	kind   kind
	reason string // ignored: why, for the answer
	ref    string // refs/heads/… or refs/tags/…
	before string
	after  string
	mr     *mergeRequestFacts
}

// mergeRequestFacts are a merge (pull) request's, for GitLab's CI_MERGE_REQUEST_* variables.
type mergeRequestFacts struct {
	ID, IID                 int64
	Title, Description      string
	SourceBranch, SourceSHA string
	TargetBranch, TargetSHA string
	Labels, Assignees       []string
	Draft                   bool
	RefPath                 string // where the forge keeps the request's head: refs/pull/N/head, refs/merge-requests/N/head
	ProjectPath, ProjectURL string
	SourcePath, SourceURL   string
	fromFork                bool
}

func ignore(format string, args ...any) event {
	return event{kind: ignored, reason: fmt.Sprintf(format, args...)}
}

// malformed is the error of a payload that its forge's client could not read.
func malformed(forge, typ string, err error) error {
	return &builds.ValidationError{Msg: fmt.Sprintf("the %s %q event's payload could not be read: %v", forge, typ, err)}
}

// parseGitHub reads a GitHub webhook (X-GitHub-Event typ); Gitea's too (X-Gitea-Event), whose
// pull request action for new commits is "synchronized" where GitHub says "synchronize".
func parseGitHub(forge, typ string, body []byte) (event, error) {
	switch typ {
	case "push", "pull_request":
	case "ping":
		return ignore("ping received: webhooks reach jobapi"), nil
	default:
		return ignore("%s events start no pipeline; jobapi builds push and pull_request events", typ), nil
	}
	parsed, err := github.ParseWebHook(typ, body)
	if err != nil {
		return event{}, malformed(forge, typ, err)
	}
	switch e := parsed.(type) {
	case *github.PushEvent:
		return pushEvent(e.GetRef(), e.GetBefore(), e.GetAfter(), e.GetHeadCommit().GetID(), e.GetDeleted())
	case *github.PullRequestEvent:
		return githubPullRequest(forge, body, e)
	}
	return ignore("%s events start no pipeline", typ), nil
}

func githubPullRequest(forge string, body []byte, e *github.PullRequestEvent) (event, error) {
	action := e.GetAction()
	// GitLab runs a merge request pipeline when the request is created, reopened, or its
	// source branch gets new commits; the rest (labels, reviews, closing) change no code.
	building := []string{"opened", "reopened", "synchronize"}
	if forge == Gitea {
		building = []string{"opened", "reopened", "synchronized"}
	}
	if !slices.Contains(building, action) {
		return ignore("pull request action %q starts no pipeline (only %s do)", action, strings.Join(building, ", ")), nil
	}
	pr := e.GetPullRequest()
	if pr == nil {
		return event{}, malformed(forge, "pull_request", fmt.Errorf("no pull_request object"))
	}
	head, base := pr.GetHead(), pr.GetBase()
	project := base.GetRepo()
	if project == nil {
		project = e.GetRepo()
	}
	mr := &mergeRequestFacts{ID: pr.GetID(), IID: int64(pr.GetNumber()), Title: pr.GetTitle(), Description: pr.GetBody(),
		SourceBranch: head.GetRef(), SourceSHA: head.GetSHA(), TargetBranch: base.GetRef(), TargetSHA: base.GetSHA(),
		Draft: pr.GetDraft(), RefPath: fmt.Sprintf("refs/pull/%d/head", pr.GetNumber()),
		ProjectPath: project.GetFullName(), ProjectURL: project.GetHTMLURL(),
		SourcePath: head.GetRepo().GetFullName(), SourceURL: head.GetRepo().GetHTMLURL()}
	if mr.IID == 0 {
		mr.IID = int64(e.GetNumber())
	}
	for _, l := range pr.Labels {
		mr.Labels = append(mr.Labels, l.GetName())
	}
	for _, u := range pr.Assignees {
		mr.Assignees = append(mr.Assignees, u.GetLogin())
	}
	// A fork's branch is not the project's: its name may be a protected branch's here.
	switch {
	case head.GetRepo() != nil && base.GetRepo() != nil:
		mr.fromFork = head.GetRepo().GetID() != base.GetRepo().GetID()
	case forge == Gitea:
		// Gitea may name the repositories by id only (repo_id), which GitHub's shape lacks.
		var ids struct {
			PullRequest struct {
				Head struct {
					RepoID int64 `json:"repo_id"`
				} `json:"head"`
				Base struct {
					RepoID int64 `json:"repo_id"`
				} `json:"base"`
			} `json:"pull_request"`
		}
		if err := json.Unmarshal(body, &ids); err != nil {
			return event{}, malformed(forge, "pull_request", err)
		}
		h, b := ids.PullRequest.Head.RepoID, ids.PullRequest.Base.RepoID
		mr.fromFork = h == 0 || h != b
	default:
		mr.fromFork = true // GitHub names both repositories; a head without one is a deleted fork
	}
	if mr.SourcePath == "" && !mr.fromFork {
		mr.SourcePath, mr.SourceURL = mr.ProjectPath, mr.ProjectURL
	}
	return mergeRequestEvent(mr)
}

// parseGitLab reads a GitLab webhook (X-Gitlab-Event typ).
func parseGitLab(typ string, body []byte) (event, error) {
	et := gitlab.EventType(typ)
	switch et {
	case gitlab.EventTypePush, gitlab.EventTypeTagPush, gitlab.EventTypeMergeRequest:
	default:
		return ignore("%s events start no pipeline; jobapi builds Push Hook, Tag Push Hook and Merge Request Hook", typ), nil
	}
	parsed, err := gitlab.ParseWebhook(et, body)
	if err != nil {
		return event{}, malformed(GitLab, typ, err)
	}
	switch e := parsed.(type) {
	case *gitlab.PushEvent:
		return pushEvent(e.Ref, e.Before, e.After, e.CheckoutSHA, false)
	case *gitlab.TagEvent:
		return pushEvent(e.Ref, e.Before, e.After, e.CheckoutSHA, false)
	case *gitlab.MergeEvent:
		return gitlabMergeRequest(e)
	}
	return ignore("%s events start no pipeline", typ), nil
}

func gitlabMergeRequest(e *gitlab.MergeEvent) (event, error) {
	a := e.ObjectAttributes
	switch {
	case a.Action == "open" || a.Action == "reopen":
	case a.Action == "update" && a.OldRev != "":
		// an update with oldrev: new commits on the source branch
	default:
		return ignore("merge request action %q starts no pipeline (open, reopen and an update with new commits do)", a.Action), nil
	}
	mr := &mergeRequestFacts{ID: a.ID, IID: a.IID, Title: a.Title, Description: a.Description,
		SourceBranch: a.SourceBranch, SourceSHA: a.LastCommit.ID, TargetBranch: a.TargetBranch,
		Draft: a.Draft || a.WorkInProgress, RefPath: fmt.Sprintf("refs/merge-requests/%d/head", a.IID),
		ProjectPath: e.Project.PathWithNamespace, ProjectURL: e.Project.WebURL,
		fromFork: a.SourceProjectID != a.TargetProjectID}
	if a.Source != nil {
		mr.SourcePath, mr.SourceURL = a.Source.PathWithNamespace, a.Source.WebURL
	}
	for _, l := range e.Labels {
		if l != nil {
			mr.Labels = append(mr.Labels, l.Title)
		}
	}
	for _, u := range e.Assignees {
		if u != nil {
			mr.Assignees = append(mr.Assignees, u.Username)
		}
	}
	return mergeRequestEvent(mr)
}

// pushEvent is a push of ref from before to after: a deletion (after all zeros) builds
// nothing, as on GitLab; so does a ref that is neither a branch nor a tag. commit is the
// commit the forge says the ref now points at (GitHub's head_commit, GitLab's
// checkout_sha): for an annotated tag, after is the tag object and commit its commit,
// which the pipeline builds.
func pushEvent(ref, before, after, commit string, deleted bool) (event, error) {
	if deleted || after == builds.ZeroSHA {
		return ignore("%s was deleted: nothing to build", ref), nil
	}
	if !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
		return ignore("ref %.100q is neither a branch nor a tag: nothing to build", ref), nil
	}
	if strings.HasPrefix(ref, "refs/tags/") && gitref.CheckSHA("commit", commit) == nil {
		after = commit
	}
	if err := gitref.CheckName("ref", ref); err != nil {
		return event{}, &builds.ValidationError{Msg: err.Error()}
	}
	if before == "" {
		before = builds.ZeroSHA
	}
	if err := gitref.CheckRevisions("", after, before); err != nil {
		return event{}, &builds.ValidationError{Msg: err.Error()}
	}
	return event{kind: push, ref: ref, before: before, after: after}, nil
}

func mergeRequestEvent(mr *mergeRequestFacts) (event, error) {
	if mr.fromFork {
		return ignore("merge request !%d comes from another repository (%s): jobapi builds only branches of the project's own repository",
			mr.IID, mr.SourcePath), nil
	}
	if err := gitref.CheckName("source branch", mr.SourceBranch); err != nil {
		return event{}, &builds.ValidationError{Msg: err.Error()}
	}
	if err := gitref.CheckName("target branch", mr.TargetBranch); err != nil {
		return event{}, &builds.ValidationError{Msg: err.Error()}
	}
	if err := gitref.CheckSHA("source sha", mr.SourceSHA); err != nil {
		return event{}, &builds.ValidationError{Msg: err.Error()}
	}
	return event{kind: mergeRequest, ref: "refs/heads/" + mr.SourceBranch, before: builds.ZeroSHA, after: mr.SourceSHA, mr: mr}, nil
}

// maxDescription is where CI_MERGE_REQUEST_DESCRIPTION is cut, as GitLab cuts it (and says
// so in CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED).
const maxDescription = 2700

// variables are GitLab's predefined variables of a merge request pipeline
// (CI_MERGE_REQUEST_*), those the forge's event gives; empty ones are left out as GitLab
// leaves them out. CI_MERGE_REQUEST_SOURCE_BRANCH_SHA and _TARGET_BRANCH_SHA are set
// whenever the event tells them (GitLab sets them only in merged results pipelines).
func (mr *mergeRequestFacts) variables(projectID int64) []builds.Variable {
	description, truncated := mr.Description, false
	if r := []rune(description); len(r) > maxDescription {
		description, truncated = string(r[:maxDescription]), true
	}
	list := [][2]string{
		{"CI_MERGE_REQUEST_ID", strconv.FormatInt(mr.ID, 10)},
		{"CI_MERGE_REQUEST_IID", strconv.FormatInt(mr.IID, 10)},
		{"CI_MERGE_REQUEST_TITLE", mr.Title},
		{"CI_MERGE_REQUEST_DESCRIPTION", description},
		{"CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED", strconv.FormatBool(truncated)},
		{"CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", mr.SourceBranch},
		{"CI_MERGE_REQUEST_SOURCE_BRANCH_SHA", mr.SourceSHA},
		{"CI_MERGE_REQUEST_TARGET_BRANCH_NAME", mr.TargetBranch},
		{"CI_MERGE_REQUEST_TARGET_BRANCH_SHA", mr.TargetSHA},
		{"CI_MERGE_REQUEST_LABELS", strings.Join(mr.Labels, ",")},
		{"CI_MERGE_REQUEST_ASSIGNEES", strings.Join(mr.Assignees, ",")},
		{"CI_MERGE_REQUEST_DRAFT", strconv.FormatBool(mr.Draft)},
		{"CI_MERGE_REQUEST_EVENT_TYPE", "detached"},
		{"CI_MERGE_REQUEST_REF_PATH", mr.RefPath},
		{"CI_MERGE_REQUEST_PROJECT_ID", strconv.FormatInt(projectID, 10)},
		{"CI_MERGE_REQUEST_PROJECT_PATH", mr.ProjectPath},
		{"CI_MERGE_REQUEST_PROJECT_URL", mr.ProjectURL},
		{"CI_MERGE_REQUEST_SOURCE_PROJECT_ID", strconv.FormatInt(projectID, 10)},
		{"CI_MERGE_REQUEST_SOURCE_PROJECT_PATH", mr.SourcePath},
		{"CI_MERGE_REQUEST_SOURCE_PROJECT_URL", mr.SourceURL},
	}
	vars := make([]builds.Variable, 0, len(list))
	for _, kv := range list {
		if kv[1] != "" {
			vars = append(vars, builds.Variable{Key: kv[0], Value: kv[1]})
		}
	}
	return vars
}
