package cisource

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobapi/jobapi/ciconfig"
)

// Commit is what a commit object says of itself: GitLab's commit in a job's `commit`.
type Commit struct {
	ID             string
	ParentIDs      []string
	Message        string
	AuthorName     string
	AuthorEmail    string
	AuthoredAt     time.Time
	CommitterName  string
	CommitterEmail string
	CommittedAt    time.Time
}

// Title is the message's first line, as GitLab's commit title.
func (c Commit) Title() string {
	title, _, _ := strings.Cut(strings.TrimLeft(c.Message, "\n"), "\n")
	return title
}

// Commit reads commit sha (a full id) of the repository at remote, fetched into the cache
// when it is not there yet. The raw object is read (git cat-file), not git log's view: the
// cache's clones are shallow, where git would show a commit without its parents. Errors as
// Read's; a sha that is not a full commit id is an *ciconfig.IncludeError.
//
// Answers are remembered (commitMemo): a commit object never changes, and a job listing
// asks for the same commits on every read; a commit that could not be fetched is not asked
// of the remote again for CommitMissTTL, so that listing jobs whose sha the remote lacks
// (or while the remote is down) does not fetch on every read.
func (g *GitCache) Commit(ctx context.Context, remote, sha string) (Commit, error) {
	if !fullSHA.MatchString(sha) {
		return Commit{}, &ciconfig.IncludeError{Message: fmt.Sprintf("%.60q is not a full commit id", sha)}
	}
	key := remote + "\x00" + sha
	if a, ok := g.commits.get(key, g.clock()); ok {
		return a.commit, a.err
	}
	c, err := g.readCommit(ctx, remote, sha)
	switch {
	case err == nil:
		g.commits.put(key, commitAnswer{commit: c})
	case ctx.Err() == nil: // not the caller giving up: the remote's answer
		g.commits.put(key, commitAnswer{err: err, until: g.clock().Add(CommitMissTTL)})
	}
	return c, err
}

func (g *GitCache) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// CommitMissTTL is how long Commit answers a commit it could not read with the same error
// before it asks the remote again.
const CommitMissTTL = time.Minute

// maxMemoCommits bounds the remembered commits: past it the memo starts afresh, which
// costs a cat-file per commit once, never a wrong answer.
const maxMemoCommits = 4096

// commitMemo remembers Commit's answers by remote and sha: a commit read, for good; a read
// that failed, until its time is up.
type commitMemo struct {
	mu      sync.Mutex
	answers map[string]commitAnswer
}

type commitAnswer struct {
	commit Commit
	err    error
	until  time.Time // for an error: when to ask again
}

func (m *commitMemo) get(key string, now time.Time) (commitAnswer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.answers[key]
	if !ok || (a.err != nil && !now.Before(a.until)) {
		return commitAnswer{}, false
	}
	return a, true
}

func (m *commitMemo) put(key string, a commitAnswer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.answers == nil || len(m.answers) >= maxMemoCommits {
		m.answers = map[string]commitAnswer{}
	}
	m.answers[key] = a
}

// readCommit reads the commit object, fetching it when the cache lacks it.
func (g *GitCache) readCommit(ctx context.Context, remote, sha string) (Commit, error) {
	var raw []byte
	err := g.at(ctx, remote, sha, func(ctx context.Context, r *repo, object string) error {
		var err error
		raw, err = r.git(ctx, "", "cat-file", "commit", "--end-of-options", object)
		return err
	})
	if err != nil {
		return Commit{}, err
	}
	c, err := parseCommit(raw)
	c.ID = sha
	return c, err
}

// parseCommit reads a raw commit object: its headers (tree, parent…, author, committer,
// and others such as gpgsig, whose continuation lines start with a space), a blank line,
// the message.
func parseCommit(raw []byte) (Commit, error) {
	var c Commit
	head, msg, _ := bytes.Cut(raw, []byte("\n\n"))
	c.Message = string(msg)
	for _, line := range strings.Split(string(head), "\n") {
		key, value, _ := strings.Cut(line, " ")
		var err error
		switch key {
		case "parent":
			c.ParentIDs = append(c.ParentIDs, value)
		case "author":
			c.AuthorName, c.AuthorEmail, c.AuthoredAt, err = parseSignature(value)
		case "committer":
			c.CommitterName, c.CommitterEmail, c.CommittedAt, err = parseSignature(value)
		}
		if err != nil {
			return c, fmt.Errorf("commit object: %s: %w", key, err)
		}
	}
	return c, nil
}

// parseSignature reads git's "Name <email> 1700000000 +0100".
func parseSignature(s string) (name, email string, at time.Time, err error) {
	open, closing := strings.Index(s, "<"), strings.LastIndex(s, ">")
	if open < 0 || closing < open {
		return "", "", time.Time{}, fmt.Errorf("no <email> in %.80q", s)
	}
	name, email = strings.TrimSpace(s[:open]), s[open+1:closing]
	fields := strings.Fields(s[closing+1:])
	if len(fields) != 2 {
		return name, email, time.Time{}, fmt.Errorf("no time and zone in %.80q", s)
	}
	secs, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return name, email, time.Time{}, fmt.Errorf("time %.20q: %w", fields[0], err)
	}
	zone, err := time.Parse("-0700", fields[1])
	if err != nil {
		return name, email, time.Time{}, fmt.Errorf("zone %.20q: %w", fields[1], err)
	}
	return name, email, time.Unix(secs, 0).In(zone.Location()), nil
}
