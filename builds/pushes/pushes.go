// Package pushes turns pushes to a project's repository into pipelines, as GitLab does for
// its own repositories: a forge's webhook (GitHub, Gitea/Forgejo or GitLab) announces a push,
// a tag or a merge request, or, for remotes that cannot call back (file://, a plain git
// server), jobapi polls the remote with git ls-remote and takes a new head for a push.
//
//	POST …/hooks/inbound/{forge} ──verify signature──▶ parse (the forge's own Go client)
//	    ──claim the delivery id (Postgres: once)──▶ Start ──▶ pipeline
//	poll pass ──claim due projects──▶ ls-remote ──compare-and-set the ref's head──▶ Start
//
// Postgres decides what happens once: a delivery id is claimed by one INSERT (its primary
// key refuses a replay, on any replica), and a head moves from the sha a replica read to the
// new one by one UPDATE … WHERE sha = $old, which only one replica's pass can do. The
// secret that forges sign with is kept as given, because HMAC needs the secret itself; no
// answer shows it.
package pushes

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/jobapi/jobapi/builds"
)

// Forges that can send webhooks, as they appear in the receiving path.
const (
	GitHub = "github"
	Gitea  = "gitea" // Forgejo too: it sends Gitea's headers and payloads
	GitLab = "gitlab"
)

// Forges lists the forges whose webhooks are received.
var Forges = []string{GitHub, Gitea, GitLab}

// Bounds of a project's push settings.
const (
	MinSecretLength = 16
	MaxSecretLength = 1024
	// MinPollInterval keeps a remote from being asked more than every few seconds, whatever
	// the number of replicas: the pass claims a project for its whole interval.
	MinPollInterval = 5 * time.Second
	MaxPollInterval = 24 * time.Hour
)

// Settings are how pushes reach one project.
type Settings struct {
	ProjectID int64
	// WebhookSecret signs (GitHub, Gitea) or is (GitLab's X-Gitlab-Token) every webhook;
	// "": webhooks are refused.
	WebhookSecret string
	// PollInterval: how often the remote is polled; 0: never.
	PollInterval time.Duration
	// PolledAt is the end of the last poll that read the remote; nil: not polled since
	// polling was turned on (the next poll records heads without starting pipelines).
	PolledAt *time.Time
	// PollError is the last poll's failure ("": it succeeded).
	PollError string
	UpdatedAt time.Time
}

// Change is an update of a project's settings; nil fields stay as they are.
type Change struct {
	WebhookSecret *string
	PollInterval  *time.Duration
}

// Head is a branch or tag of a repository and its commit (a tag's, peeled).
type Head struct {
	Ref string // refs/heads/… or refs/tags/…
	SHA string
}

// Delivery is a webhook delivery as its claim records it.
type Delivery struct {
	ProjectID  int64
	Forge      string
	ID         string // the forge's delivery id, or sha256:<body's hash> when it sent none
	Event      string
	ReceivedAt time.Time
	// PipelineID is the pipeline the delivery created; 0: none (yet, or ever).
	PipelineID int64
}

// Store keeps push settings, webhook deliveries and polled heads. PushSettings,
// UpdatePushSettings, ClaimDelivery and PollTarget return builds.ErrNotFound when the
// project does not exist; the others change nothing for a project that does not.
type Store interface {
	// PushSettings reads a project's settings (zero ones when never set).
	PushSettings(ctx context.Context, projectID int64) (Settings, error)
	// UpdatePushSettings applies c at now. Turning polling on (from off) forgets the heads
	// polled before, so that the first poll records them again.
	UpdatePushSettings(ctx context.Context, projectID int64, c Change, now time.Time) (Settings, error)

	// ClaimDelivery records d unless its (project, forge, id) was claimed before; claimed
	// false and the earlier claim when it was.
	ClaimDelivery(ctx context.Context, d Delivery) (earlier Delivery, claimed bool, err error)
	// DeliveryCreated records the pipeline a claimed delivery created.
	DeliveryCreated(ctx context.Context, d Delivery, pipelineID int64) error
	// ReleaseDelivery forgets a claim whose pipeline could not be created, so that the
	// forge's redelivery may try again.
	ReleaseDelivery(ctx context.Context, d Delivery) error
	// PruneDeliveries forgets claims received before before, at most limit of them.
	PruneDeliveries(ctx context.Context, before time.Time, limit int) (int, error)

	// ClaimPolls takes up to limit projects due for a poll at now (polling on, next poll
	// not after now) and moves their next poll an interval on, so that no other pass takes
	// them before then.
	ClaimPolls(ctx context.Context, now time.Time, limit int) ([]PollTarget, error)
	// PollTarget reads one project as a poll sees it, due or not.
	PollTarget(ctx context.Context, projectID int64) (PollTarget, error)
	// Heads are the heads recorded for a project by ref.
	Heads(ctx context.Context, projectID int64) (map[string]string, error)
	// RecordHeads records heads not recorded yet, without moving any (a first poll).
	RecordHeads(ctx context.Context, projectID int64, heads []Head, now time.Time) error
	// MoveHead moves ref from old to new ("" old: not recorded yet; "" new: the ref is
	// gone); false when the recorded head is not old any more (another pass moved it).
	MoveHead(ctx context.Context, projectID int64, ref, old, new string, now time.Time) (bool, error)
	// Polled records the end of a poll that read the project's remote, and what failed
	// after ("": nothing); PollFailed a poll that could not read it (the heads stay
	// unrecorded until one does).
	Polled(ctx context.Context, projectID int64, at time.Time, failure string) error
	PollFailed(ctx context.Context, projectID int64, failure string) error
}

// PollTarget is a project whose remote a poll reads.
type PollTarget struct {
	ProjectID int64
	RepoURL   string
	// Primed: heads were recorded since polling was turned on; false: this poll records
	// them without starting pipelines.
	Primed bool
}

// Start is a pipeline to create from the project's repository at a commit.
type Start struct {
	ProjectID int64
	Ref       string // a branch's name, or refs/tags/… for a tag
	SHA       string
	BeforeSHA string // the ref's previous tip; builds.ZeroSHA for a new ref or a merge request
	Source    string // builds.SourcePush or builds.SourceMergeRequestEvent
	// Variables are the merge request's CI_MERGE_REQUEST_* variables (none for a push).
	Variables []builds.Variable
}

// StartFunc creates a pipeline from the repository at s.SHA: it compiles the CI
// configuration read at that commit.
type StartFunc func(ctx context.Context, s Start) (builds.Pipeline, error)

// RemoteHeads lists the branches and tags of a remote (git ls-remote).
type RemoteHeads func(ctx context.Context, remote string) ([]Head, error)

// Service receives webhooks, polls remotes and keeps the settings of both.
type Service struct {
	store Store
	start StartFunc
	heads RemoteHeads
	now   func() time.Time
	log   *slog.Logger
}

// NewService returns a Service over store that creates pipelines with start and lists a
// remote's heads with heads; now nil is time.Now, log nil discards.
func NewService(store Store, start StartFunc, heads RemoteHeads, now func() time.Time, log *slog.Logger) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, start: start, heads: heads, now: now, log: log}
}

// Settings reads a project's push settings.
func (s *Service) Settings(ctx context.Context, projectID int64) (Settings, error) {
	return s.store.PushSettings(ctx, projectID)
}

// UpdateSettings checks and applies c; a *builds.ValidationError names what is wrong.
func (s *Service) UpdateSettings(ctx context.Context, projectID int64, c Change) (Settings, error) {
	if c.WebhookSecret != nil {
		if err := checkSecret(*c.WebhookSecret); err != nil {
			return Settings{}, err
		}
	}
	if c.PollInterval != nil {
		if d := *c.PollInterval; d != 0 && (d < MinPollInterval || d > MaxPollInterval) {
			return Settings{}, &builds.ValidationError{Msg: fmt.Sprintf("poll_interval must be 0 (off) or between %d and %d seconds",
				int(MinPollInterval.Seconds()), int(MaxPollInterval.Seconds()))}
		}
	}
	return s.store.UpdatePushSettings(ctx, projectID, c, s.now())
}

func checkSecret(secret string) error {
	if secret == "" {
		return nil // turns webhooks off
	}
	if n := len(secret); n < MinSecretLength || n > MaxSecretLength {
		return &builds.ValidationError{Msg: fmt.Sprintf("webhook_secret must be %d to %d characters (it signs every webhook: "+
			"use a long random one, e.g. openssl rand -hex 24), or empty to turn webhooks off", MinSecretLength, MaxSecretLength)}
	}
	if strings.IndexFunc(secret, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return &builds.ValidationError{Msg: "webhook_secret must not contain spaces or control characters (forges trim them)"}
	}
	return nil
}
