// Package triggers holds a project's pipeline trigger tokens (GitLab's /projects/:id/triggers)
// and starts pipelines with them (POST /projects/:id/trigger/pipeline). A trigger token
// (glptt-) starts a pipeline of its own project whose CI_PIPELINE_SOURCE is trigger; the job
// token of a job on a runner starts one of the job's project whose source is pipeline. Tokens
// are stored hashed: the whole token is shown once, when it is created, then only its last
// four characters, as GitLab shows a token to whoever does not own it.
package triggers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/secrettoken"
)

// TokenPrefix is GitLab's prefix of pipeline trigger tokens.
const TokenPrefix = "glptt-"

// maxDescription bounds a trigger's description (GitLab's column is text; 255 keeps the
// list readable and the table small).
const maxDescription = 255

// Trigger is a project's trigger token, without the token.
type Trigger struct {
	ID          int64
	ProjectID   int64
	Description string
	// TokenLast4 is the token's last four characters, what the API shows after creation.
	TokenLast4 string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	LastUsed   *time.Time
	// Owner is who created it (nil: a trigger made before owners were kept).
	Owner *builds.PipelineUser
}

// Created is a trigger as its creation answers it: the one time its token is shown whole.
type Created struct {
	Trigger
	Token string
}

// Store keeps trigger tokens. Every method that names a project returns builds.ErrNotFound
// when the project, or its trigger, does not exist.
type Store interface {
	CreateTrigger(ctx context.Context, t Trigger, tokenHash []byte) (Trigger, error)
	// Triggers lists one page of a project's triggers, oldest first, and their total.
	Triggers(ctx context.Context, projectID int64, page builds.Page) ([]Trigger, int, error)
	Trigger(ctx context.Context, projectID, id int64) (Trigger, error)
	UpdateTrigger(ctx context.Context, projectID, id int64, description string, now time.Time) (Trigger, error)
	DeleteTrigger(ctx context.Context, projectID, id int64) error
	// UseTrigger finds the trigger whose token hashes to tokenHash and records now as its
	// last use; builds.ErrNotFound when no trigger has that token.
	UseTrigger(ctx context.Context, tokenHash []byte, now time.Time) (Trigger, error)
	// JobOnRunner finds the build on a runner (running or canceling) whose job token hashes
	// to tokenHash; builds.ErrNotFound when none has.
	JobOnRunner(ctx context.Context, tokenHash []byte) (builds.Build, error)
}

// Start is a pipeline to create from the project's repository at Ref.
type Start struct {
	ProjectID int64
	Ref       string
	Source    string // builds.SourceTrigger or builds.SourcePipeline
	Variables []builds.Variable
	// ServerURL is CI_SERVER_URL as the configuration's rules see it ("": the server's).
	ServerURL string
}

// StartFunc creates a pipeline from the repository: it resolves the ref on the project's
// remote and compiles the CI configuration read there.
type StartFunc func(ctx context.Context, s Start) (builds.Pipeline, error)

// Auditor records a change that succeeded in the audit log, naming the context's actor
// (builds.Service.RecordAudit).
type Auditor interface {
	RecordAudit(ctx context.Context, action, target string, detail map[string]any)
}

// Service manages trigger tokens and runs them.
type Service struct {
	store Store
	start StartFunc
	audit Auditor
	now   func() time.Time
}

// NewService returns a Service over store that creates pipelines with start and records
// every change of a token with audit; now nil is time.Now.
func NewService(store Store, start StartFunc, audit Auditor, now func() time.Time) *Service {
	if store == nil || start == nil || audit == nil {
		panic("triggers.NewService: store, start and audit are required")
	}
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, start: start, audit: audit, now: now}
}

func target(projectID int64) string { return fmt.Sprintf("project:%d", projectID) }

// detail is what the audit log keeps of a trigger: never its token, not even the last four.
func detail(t Trigger) map[string]any {
	return map[string]any{"trigger_id": t.ID, "description": t.Description}
}

func checkDescription(d string) error {
	if !utf8.ValidString(d) || strings.ContainsRune(d, 0) {
		return &builds.ValidationError{Msg: "description must be UTF-8 text without NUL"}
	}
	if utf8.RuneCountInString(d) > maxDescription {
		return &builds.ValidationError{Msg: fmt.Sprintf("description is longer than %d characters", maxDescription)}
	}
	return nil
}

// Create makes a trigger token for a project, owned by the context's actor; the answer
// holds the token, which is never shown whole again.
func (s *Service) Create(ctx context.Context, projectID int64, description string) (Created, error) {
	if err := checkDescription(description); err != nil {
		return Created{}, err
	}
	token := secrettoken.New(TokenPrefix)
	now := s.now()
	t := Trigger{ProjectID: projectID, Description: description, TokenLast4: token[len(token)-4:], CreatedAt: now, UpdatedAt: now}
	if a, ok := builds.ActorFrom(ctx); ok {
		t.Owner = builds.PipelineUserOf(a)
	}
	t, err := s.store.CreateTrigger(ctx, t, secrettoken.Hash(token))
	if err != nil {
		return Created{}, err
	}
	s.audit.RecordAudit(ctx, "trigger_created", target(projectID), detail(t))
	return Created{Trigger: t, Token: token}, nil
}

// List returns one page of a project's triggers, oldest first, and their total.
func (s *Service) List(ctx context.Context, projectID int64, page builds.Page) ([]Trigger, int, error) {
	return s.store.Triggers(ctx, projectID, page)
}

// Get returns one trigger of a project.
func (s *Service) Get(ctx context.Context, projectID, id int64) (Trigger, error) {
	return s.store.Trigger(ctx, projectID, id)
}

// Update changes a trigger's description.
func (s *Service) Update(ctx context.Context, projectID, id int64, description string) (Trigger, error) {
	if err := checkDescription(description); err != nil {
		return Trigger{}, err
	}
	t, err := s.store.UpdateTrigger(ctx, projectID, id, description, s.now())
	if err != nil {
		return Trigger{}, err
	}
	s.audit.RecordAudit(ctx, "trigger_updated", target(projectID), detail(t))
	return t, nil
}

// Delete removes a trigger; its token stops working at once.
func (s *Service) Delete(ctx context.Context, projectID, id int64) error {
	if err := s.store.DeleteTrigger(ctx, projectID, id); err != nil {
		return err
	}
	s.audit.RecordAudit(ctx, "trigger_deleted", target(projectID), map[string]any{"trigger_id": id})
	return nil
}

// Run is a request to start a pipeline with a token.
type Run struct {
	ProjectID int64
	Token     string
	Ref       string
	Variables []builds.Variable
	ServerURL string // as Start's
}

// maxTokenLength bounds what is hashed and looked up: longer is no token of ours.
const maxTokenLength = 256

// Run starts a pipeline of the project at the ref with a trigger token (source trigger) or
// the job token of a job on a runner in the same project (source pipeline). A token that
// is unknown, or belongs to another project, is builds.ErrNotFound (GitLab's 404), so that
// an answer does not tell whether a token exists elsewhere.
func (s *Service) Run(ctx context.Context, r Run) (builds.Pipeline, error) {
	if r.Token == "" {
		return builds.Pipeline{}, &builds.ValidationError{Msg: "token is missing"}
	}
	if r.Ref == "" {
		return builds.Pipeline{}, &builds.ValidationError{Msg: "ref is missing"}
	}
	if len(r.Token) > maxTokenLength {
		return builds.Pipeline{}, fmt.Errorf("token: %w", builds.ErrNotFound)
	}
	hash := secrettoken.Hash(r.Token)
	source := builds.SourceTrigger
	if strings.HasPrefix(r.Token, TokenPrefix) {
		t, err := s.store.UseTrigger(ctx, hash, s.now())
		if err != nil {
			return builds.Pipeline{}, err
		}
		if t.ProjectID != r.ProjectID {
			return builds.Pipeline{}, fmt.Errorf("trigger token of project %d: %w", r.ProjectID, builds.ErrNotFound)
		}
		ctx = builds.WithActor(ctx, builds.Actor{Kind: builds.ActorTrigger, Username: "trigger #" + strconv.FormatInt(t.ID, 10)})
	} else {
		// A job token: jobapi has no allowlist of other projects a job may reach (GitLab's
		// job token scope), so a job triggers pipelines of its own project only.
		b, err := s.store.JobOnRunner(ctx, hash)
		if err != nil {
			return builds.Pipeline{}, err
		}
		if b.ProjectID != r.ProjectID {
			return builds.Pipeline{}, fmt.Errorf("job token of project %d: %w", r.ProjectID, builds.ErrNotFound)
		}
		source = builds.SourcePipeline
		ctx = builds.WithActor(ctx, builds.Actor{Kind: builds.ActorTrigger, Username: "job #" + strconv.FormatInt(b.ID, 10), Via: "job token"})
	}
	return s.start(ctx, Start{ProjectID: r.ProjectID, Ref: r.Ref, Source: source, Variables: r.Variables, ServerURL: r.ServerURL})
}
