package jobapitest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

// Replicas in a test's own process cannot be killed: suites that SIGKILL one run a real
// `jobapi serve` built from the repository.

// BuildJobapi compiles cmd/jobapi into the test's temporary directory, with -race when the
// test itself runs with it (the packages then come from the test build's cache).
func BuildJobapi(t *testing.T) string {
	t.Helper()
	// go test puts its own toolchain first on the test's PATH, so this is the go that runs us.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jobapi")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "github.com/jobapi/jobapi/cmd/jobapi")...)
	cmd.Dir = ModuleRoot(t)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/jobapi: %v\n%s", err, out)
	}
	t.Logf("built jobapi in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// StartServe runs `jobapi serve` on cfg's database, Redis and key prefix, with env
// overriding settings, and returns once it listens. The process is killed when the test
// ends (and by the kernel if the test binary dies first).
func StartServe(t *testing.T, bin string, cfg server.Config, env map[string]string) (*exec.Cmd, *testenv.Buffer) {
	t.Helper()
	vars := map[string]string{
		"JOBAPI_LISTEN_ADDR":             "127.0.0.1:0",
		"JOBAPI_DATABASE_URL":            cfg.DatabaseURL,
		"JOBAPI_REDIS_URL":               cfg.RedisURL,
		"JOBAPI_REDIS_KEY_PREFIX":        cfg.RedisKeyPrefix,
		"JOBAPI_ADMIN_TOKEN":             cfg.AdminToken,
		"JOBAPI_AUTO_MIGRATE":            "false",
		"JOBAPI_ACK_TTL":                 cfg.AckTTL.String(),
		"JOBAPI_DATABASE_MAX_CONNS":      "5",
		"JOBAPI_OBJECT_STORE":            cfg.ObjectStore,
		"JOBAPI_MAX_ARTIFACT_SIZE":       strconv.FormatInt(cfg.MaxArtifactSize, 10),
		"JOBAPI_ARTIFACT_UPLOAD_TIMEOUT": cfg.ArtifactUploadTimeout.String(),
	}
	if c := cfg.ObjectStoreCredentials; c.AccessKeyID != "" {
		vars["AWS_ACCESS_KEY_ID"], vars["AWS_SECRET_ACCESS_KEY"] = c.AccessKeyID, c.SecretAccessKey
	}
	if len(cfg.RedisClusterAddrs) > 0 {
		vars["JOBAPI_REDIS_CLUSTER_ADDRS"] = strings.Join(cfg.RedisClusterAddrs, ",")
	}
	for k, v := range env {
		vars[k] = v
	}
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JOBAPI_") && !strings.HasPrefix(kv, "AWS_") {
			environ = append(environ, kv)
		}
	}
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}
	logs := &testenv.Buffer{}
	cmd := exec.Command(bin, "serve")
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jobapi serve log:\n%s", logs)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "jobapi listening") {
		if time.Now().After(deadline) {
			t.Fatalf("jobapi serve not listening after 30 s:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "jobapi listening" {
			t.Logf("jobapi serve (pid %d) listening on %s", cmd.Process.Pid, rec.Addr)
		}
	}
	return cmd, logs
}

// ServeURL reads the address a `jobapi serve` logged (its log from StartServe).
func ServeURL(t testing.TB, log string) string {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if i := strings.Index(line, `"addr":"`); i >= 0 && strings.Contains(line, "jobapi listening") {
			addr := line[i+len(`"addr":"`):]
			return "http://" + addr[:strings.IndexByte(addr, '"')]
		}
	}
	t.Fatalf("no listen address in the log:\n%s", log)
	return ""
}
