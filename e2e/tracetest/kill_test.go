package tracetest_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/runnerclient"
)

// TestReplicaKilledAroundArchive: a replica (a real `jobapi serve`) takes a runner's final
// update of a job with a 30 MB log and is SIGKILLed right after answering, while its archive
// of the log is under way. Nothing is lost: the log stays readable whole from a surviving
// replica, which archives it once the dead replica's claim has run out, byte for byte;
// what the killed archive left in the store goes with the artifacts pass.
func TestReplicaKilledAroundArchive(t *testing.T) {
	t.Parallel()
	bin := jobapitest.BuildJobapi(t)
	var clock atomic.Int64 // how far the survivor's clock is ahead
	inst := start(t, jobapitest.Options{Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }}, nil)
	victim, logs := jobapitest.StartServe(t, bin, inst.Config, nil)
	victimURL := jobapitest.ServeURL(t, logs.String())
	_, token := inst.CreateRunner(t)
	r := jobapitest.NewRunner(t, victimURL, token, "s_victim00001")
	inst.CreatePipeline(t, 1, []string{"build"}, jobapitest.Job{"name": "build", "stage": "build", "script": "make"})
	job := r.TakeNamed(t, "build")
	log := makeLog(30<<20, "killed")
	appendLog(t, r, job, log)

	r.Finish(t, job, runnerclient.StateSuccess, "")
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()

	chunks, listed := liveState(t, inst, job.ID)
	var claimed bool
	if err := inst.Pool.QueryRow(context.Background(),
		`SELECT coalesce((SELECT due_at > now() FROM trace_archives WHERE build_id = $1), false)`, job.ID).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the kill: %d live chunks, listed %v, claimed by the victim %v, %d temporary files", chunks, listed, claimed, len(tempFiles(t, inst)))
	if !listed {
		t.Fatal("the victim archived the whole log before the kill: the kill came too late to test anything")
	}
	// The log is whole meanwhile, from the survivor.
	if resp, b := getTrace(t, inst, 1, job.ID); resp.StatusCode != http.StatusOK || len(b) != len(log) || string(b) != string(log) {
		t.Fatalf("trace after the kill: %d, %d bytes; want the whole log", resp.StatusCode, len(b))
	}
	if claimed {
		// The dead replica's claim holds until its lease ends.
		passOnce(t, inst)
		if chunks, _ := liveState(t, inst, job.ID); chunks == 0 {
			t.Fatal("a survivor took a claimed build within its lease")
		}
	}
	clock.Store(int64(joblogs.ArchiveLease + time.Minute))
	passOnce(t, inst)
	wantArchived(t, inst, 1, job.ID, log)

	clock.Store(int64(joblogs.ArchiveLease + time.Hour))
	if _, err := inst.Artifacts.PassOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := tempFiles(t, inst); len(left) > 0 {
		t.Errorf("the killed archive's files outlived the artifacts pass: %v", left)
	}
	var objects int
	if err := inst.Objects.List(context.Background(), "", func(builds.ObjectInfo) error { objects++; return nil }); err != nil {
		t.Fatal(err)
	}
	if objects != 1 {
		t.Errorf("%d objects in the store, want the one archive", objects)
	}
}

// tempFiles lists what unfinished writes left in the instance's directory store.
func tempFiles(t *testing.T, inst *jobapitest.Instance) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(strings.TrimPrefix(inst.Config.ObjectStore, "file://"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.Contains(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
		return nil
	})
	return out
}
