package builds

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// unitDeps are the roles of a service under a unit test around store: fakes that answer
// without storage (the store's own fakes panic on what a test does not expect), and no
// Redis (Standalone).
func unitDeps(store Store) Deps {
	return Deps{Store: store, Leases: noLeases{}, Queue: fixedQueue("v1"),
		QueueFeed: Standalone, Events: Standalone, Changes: Standalone, Live: Standalone,
		TwoPhase: NeverTwoPhase, Observer: Unobserved, Audit: &memAudit{}, Projects: implicitProjects{}}
}

// memAudit keeps the audit log in memory.
type memAudit struct {
	mu     sync.Mutex
	events []AuditEvent
}

func (a *memAudit) AddAudit(_ context.Context, e AuditEvent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
	return nil
}

// implicitProjects has no project rows: every project is implicit.
type implicitProjects struct{}

func (implicitProjects) Project(context.Context, int64) (Project, error) {
	return Project{}, ErrNotFound
}
func (implicitProjects) JobProject(context.Context, int64) (JobProject, error) {
	return JobProject{}, nil
}

// A service missing a role is refused at construction, naming every missing one, rather
// than running in a mode nobody chose.
func TestNewServiceRefusesMissingDeps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(*Deps)
		want  string
	}{
		{"audit", func(d *Deps) { d.Audit = nil }, "Deps.Audit required"},
		{"projects and live", func(d *Deps) { d.Projects, d.Live = nil, nil }, "Deps.Projects, Deps.Live required"},
		{"feeds", func(d *Deps) { d.QueueFeed, d.Events, d.Changes = nil, nil, nil }, "Deps.QueueFeed, Deps.Events, Deps.Changes required"},
		{"observer and two-phase", func(d *Deps) { d.Observer, d.TwoPhase = nil, nil }, "Deps.TwoPhase, Deps.Observer required"},
		{"store", func(d *Deps) { d.Store = nil }, "Deps.Store required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := unitDeps(&tokenStore{})
			tc.leave(&d)
			defer func() {
				got, _ := recover().(string)
				if !strings.Contains(got, tc.want) {
					t.Errorf("panic %q, want it to say %q", got, tc.want)
				}
			}()
			NewService(d)
			t.Error("NewService accepted a missing role")
		})
	}
}

// Standalone is the named mode without Redis's feeds: no change hints go out and none can
// be subscribed to, and the background loops only wait for shutdown.
func TestStandaloneDoesWithoutFeeds(t *testing.T) {
	svc := NewService(unitDeps(&tokenStore{}))
	svc.changed(Change{PipelineID: 1})
	if n := svc.FlushChanges(context.Background()); n != 0 {
		t.Errorf("flushed %d change hints, want none", n)
	}
	if err := svc.SubscribeChanges(context.Background(), func() {}, func(Change) {}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("SubscribeChanges: %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for name, run := range map[string]func(context.Context) error{
		"RunQueueFeed": svc.RunQueueFeed, "RunPipelineEvents": svc.RunPipelineEvents, "RunChangeFeed": svc.RunChangeFeed,
	} {
		if err := run(ctx); err != nil || ctx.Err() == nil {
			t.Errorf("%s returned %v before shutdown", name, err)
		}
	}
}
