package handlers

// GitLab's `commit` of a job and `user` of a job and a pipeline, from what jobapi knows:
// the commit object in the project's repository (read through the include cache, which
// pipelines from the repository have already fetched it into), and the creator the
// pipeline keeps (builds.PipelineUser).

import (
	"context"
	"fmt"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/cisource"
)

// commitReadTimeout bounds the commit reads of one answer: a listing does not wait long for
// a slow remote; the commits it could not read are shown by id.
const commitReadTimeout = 5 * time.Second

// userView is GitLab's user of a pipeline's creator: a person as the users service knows
// them, the admin token's holder as GET /user shows it, machinery (a trigger, a schedule,
// a webhook, a poll, a job's token) by its name with id 0, as it is no user.
func userView(base string, u *builds.PipelineUser) *api.User {
	switch {
	case u == nil:
		return nil
	case u.Kind == builds.ActorAdminToken:
		a := adminUser(base)
		return &a
	case u.Kind == builds.ActorUser:
		name := u.Name
		if name == "" {
			name = u.Username
		}
		return &api.User{ID: u.UserID, Username: u.Username, Name: name, State: "active", WebURL: base + "/" + u.Username}
	}
	return &api.User{Username: u.Username, Name: u.Username, State: "active", Bot: true}
}

// commitKey names a commit of a project's repository.
type commitKey struct {
	projectID int64
	sha       string
}

// jobCommits reads the commits of keys from their projects' repositories, one read each;
// what cannot be read (no repository, a sha the remote does not have, a remote down) is
// left out, and the caller shows those by id.
func (h *Handler) jobCommits(ctx context.Context, keys []commitKey) map[commitKey]cisource.Commit {
	out := map[commitKey]cisource.Commit{}
	if h.includes == nil || h.includes.Git == nil || len(keys) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, commitReadTimeout)
	defer cancel()
	remotes := map[int64]string{}
	for _, k := range keys {
		remote, ok := remotes[k.projectID]
		if !ok {
			if jp, err := h.svc.ProjectForPipeline(ctx, k.projectID); err == nil && jp.Project != nil {
				remote = jp.Project.RepoURL
			}
			remotes[k.projectID] = remote
		}
		if remote == "" {
			continue
		}
		if _, done := out[k]; done {
			continue
		}
		c, err := h.includes.Git.Commit(ctx, remote, k.sha)
		if err != nil {
			h.log.DebugContext(ctx, "job commit not read", "project_id", k.projectID, "sha", k.sha, "error", err)
			continue
		}
		out[k] = c
	}
	return out
}

// commitView is GitLab's commit of a job: c when read, else sha by its ids.
func commitView(projectURL, sha string, c cisource.Commit, read bool) *api.JobCommit {
	short := sha
	if len(short) > 8 {
		short = short[:8]
	}
	out := &api.JobCommit{ID: sha, ShortID: short, ParentIDs: []string{}, WebURL: fmt.Sprintf("%s/-/commit/%s", projectURL, sha)}
	if !read {
		return out
	}
	title, msg := c.Title(), c.Message
	out.Title, out.Message = &title, &msg
	if c.ParentIDs != nil {
		out.ParentIDs = c.ParentIDs
	}
	authored, committed := c.AuthoredAt, c.CommittedAt
	out.CreatedAt, out.AuthoredDate, out.CommittedDate = &committed, &authored, &committed
	out.AuthorName, out.AuthorEmail = &c.AuthorName, &c.AuthorEmail
	out.CommitterName, out.CommitterEmail = &c.CommitterName, &c.CommitterEmail
	return out
}
