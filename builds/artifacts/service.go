// Package artifacts keeps the files jobs upload (their archives and reports): the runner's
// upload and dependency download, the operator's listing, download and deletion, files read
// out of an archive, and the pipeline test report parsed from JUnit reports. It is a small
// service over its own store (artifact rows, Postgres) and the object store (the bytes),
// and asks the core (package builds) only for a project's build, a running job's token
// checked and an operator action recorded; the core knows nothing of it.
package artifacts

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// Builds is what artifacts asks of the core; *builds.Service serves it.
type Builds interface {
	// ProjectJob returns one build of a project; builds.ErrNotFound when the project has
	// no such build.
	ProjectJob(ctx context.Context, projectID, id int64) (builds.Build, error)
	// RunningJob checks a runner's job token for a call made while the job runs.
	RunningJob(ctx context.Context, id int64, token string) (builds.Build, error)
	// Pipeline returns a pipeline of a project with its builds.
	Pipeline(ctx context.Context, projectID, id int64) (builds.Pipeline, error)
	// RecordAudit records an operator action that succeeded.
	RecordAudit(ctx context.Context, action, target string, detail map[string]any)
}

var _ Builds = (*builds.Service)(nil)

// Config holds the artifacts' tunables.
type Config struct {
	// MaxSize caps one uploaded artifact (0: no cap).
	MaxSize int64
	// ExpireIn is an artifact's lifetime when the upload names none.
	ExpireIn ExpireIn
	// UploadTimeout is the longest an upload may take: an upload's object that is not
	// committed by then is garbage (0: an hour).
	UploadTimeout time.Duration
}

// Deps are what a Service is built from. Builds, Store and Objects are required: New
// panics without them, as production always gives them.
type Deps struct {
	Builds  Builds
	Store   Store
	Objects builds.ObjectStore
	Config  Config
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log receives what the service cannot return (nil: discarded).
	Log *slog.Logger
}

// Service serves job artifacts.
type Service struct {
	builds  Builds
	store   Store
	objects builds.ObjectStore
	cfg     Config
	now     func() time.Time
	log     *slog.Logger
	reports *junitReports // parsed JUnit artifacts, and the slots to parse them in
}

// New wires the service.
func New(d Deps) *Service {
	switch {
	case d.Builds == nil:
		panic("artifacts.New: Deps.Builds is required")
	case d.Store == nil:
		panic("artifacts.New: Deps.Store is required")
	case d.Objects == nil:
		panic("artifacts.New: Deps.Objects is required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Config.UploadTimeout == 0 {
		d.Config.UploadTimeout = time.Hour
	}
	return &Service{builds: d.Builds, store: d.Store, objects: d.Objects, cfg: d.Config, now: d.Now, log: d.Log,
		reports: newJUnitReports(junitParses, junitParseWait, junitCacheSize)}
}

// Config returns the service's settings.
func (s *Service) Config() Config { return s.cfg }
