package pgstore

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// bridgeParent stores a pipeline whose first stage is a depend bridge and whose second a job.
func bridgeParent(t *testing.T, s *Store, now time.Time) builds.Pipeline {
	t.Helper()
	d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"children", "deploy"}, Jobs: []builds.JobDefinition{
		{Name: "child", Stage: "children", Trigger: &builds.Trigger{Include: []builds.TriggerInclude{{Local: "c.yml"}},
			Strategy: builds.StrategyDepend, ForwardYAMLVariables: true}},
		{Name: "deploy", Stage: "deploy", Script: []string{"./deploy"}},
	}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	p, err := s.CreatePipeline(t.Context(), d, now)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func childDefinition(t *testing.T) *builds.PipelineDefinition {
	t.Helper()
	d := &builds.PipelineDefinition{ProjectID: 1, Source: builds.SourceParentPipeline, ParentBuildID: 1,
		Stages: []string{"test"}, Jobs: []builds.JobDefinition{{Name: "unit", Stage: "test", Script: []string{"make test"}}}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	return d
}

func countChildren(t *testing.T, pool *pgxpool.Pool) (pipelines, jobs int) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pipelines WHERE parent_build_id IS NOT NULL),
        (SELECT count(*) FROM builds b JOIN pipelines p ON p.id = b.pipeline_id WHERE p.parent_build_id IS NOT NULL)`).Scan(&pipelines, &jobs)
	if err != nil {
		t.Fatal(err)
	}
	return pipelines, jobs
}

// TestCreateChildIsOneTransaction: a fault after the child's rows went in (the bridge's
// event refused by the database) leaves neither the child nor a moved bridge; the next
// attempt creates it whole.
func TestCreateChildIsOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.Pool(t)
	s := New(pool)
	now := time.Now().UTC().Truncate(time.Microsecond)
	parent := bridgeParent(t, s, now)
	bridge := parent.Builds[0]
	if bridge.Status != builds.StatusPending || !bridge.Bridge {
		t.Fatalf("bridge %+v, want a pending bridge", bridge)
	}
	pending, err := s.PendingBridges(ctx, 10)
	if err != nil || len(pending) != 1 || pending[0].Build.ID != bridge.ID || pending[0].Pipeline.ID != parent.ID {
		t.Fatalf("PendingBridges = %+v, %v", pending, err)
	}
	if _, err := pool.Exec(ctx, `
CREATE FUNCTION refuse_downstream() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected fault'; END $$;
CREATE TRIGGER refuse_downstream BEFORE INSERT ON build_events FOR EACH ROW
WHEN (NEW.type = 'downstream_created') EXECUTE FUNCTION refuse_downstream();`); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateChild(ctx, builds.ChildPipeline{BridgeID: bridge.ID, Definition: childDefinition(t), Now: now})
	if err == nil {
		t.Fatal("CreateChild succeeded through the injected fault")
	}
	if p, j := countChildren(t, pool); p != 0 || j != 0 {
		t.Errorf("after the fault: %d child pipelines, %d child jobs stored, want none", p, j)
	}
	if b, err := s.Build(ctx, bridge.ID); err != nil || b.Status != builds.StatusPending {
		t.Errorf("bridge after the fault: %v %v, want pending", b.Status, err)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER refuse_downstream ON build_events`); err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateChild(ctx, builds.ChildPipeline{BridgeID: bridge.ID, Definition: childDefinition(t), Now: now})
	if err != nil || res.ChildID == 0 || res.Bridge.Status != builds.StatusRunning {
		t.Fatalf("CreateChild after the fault: %+v, %v", res, err)
	}
	if p, j := countChildren(t, pool); p != 1 || j != 1 {
		t.Errorf("%d child pipelines, %d child jobs, want 1 and 1", p, j)
	}
}

// TestCreateChildRace: stores on two pools (two replicas) create the child of the same
// bridges at once: each bridge gets exactly one child, the others ErrBridgeTaken. The
// child's end then ends the bridge and releases the parent's next stage in its own
// transaction.
func TestCreateChildRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.DatabaseURL(t)
	var stores []*Store
	for range 2 {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		stores = append(stores, New(pool))
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	const parents, racers = 5, 8
	var bridges []int64
	var parentIDs []int64
	for range parents {
		p := bridgeParent(t, stores[0], now)
		bridges = append(bridges, p.Builds[0].ID)
		parentIDs = append(parentIDs, p.ID)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := map[int64][]int64{}
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[i%2]
			for _, id := range bridges {
				res, err := s.CreateChild(ctx, builds.ChildPipeline{BridgeID: id, Definition: childDefinition(t), Now: now})
				switch {
				case errors.Is(err, builds.ErrBridgeTaken):
				case err != nil:
					t.Errorf("CreateChild %d: %v", id, err)
				default:
					mu.Lock()
					created[id] = append(created[id], res.ChildID)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range bridges {
		if len(created[id]) != 1 {
			t.Errorf("bridge %d: children %v, want exactly one", id, created[id])
		}
	}
	pool := stores[0].pool.pool
	if p, _ := countChildren(t, pool); p != parents {
		t.Errorf("%d child pipelines stored, want %d", p, parents)
	}

	// The child's only job ends: the bridge succeeds and deploy is queued, at once.
	child := created[bridges[0]][0]
	var unit int64
	if err := pool.QueryRow(ctx, `SELECT id FROM builds WHERE pipeline_id = $1`, child).Scan(&unit); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Second)
	if _, err := stores[1].Finish(ctx, builds.Finish{BuildID: unit, From: []builds.Status{builds.StatusPending},
		To: builds.StatusCanceled, Event: builds.EventCanceled, Now: later}); err != nil {
		t.Fatal(err)
	}
	p, err := stores[0].Pipeline(ctx, 1, parentIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]builds.Status{}
	for _, b := range p.Builds {
		got[b.Name] = b.Status
	}
	// A canceled child cancels its depend bridge (GitLab: inherit_finish_cancel), and the
	// parent skips deploy.
	if got["child"] != builds.StatusCanceled || got["deploy"] != builds.StatusSkipped || p.Status != builds.PipelineCanceled {
		t.Errorf("parent after its child was canceled: %v, pipeline %s", got, p.Status)
	}
}
