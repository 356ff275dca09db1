package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/server"
	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigListsEverySetting(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config"}, env(nil), &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, s := range server.Settings {
		if !strings.Contains(out.String(), s.Env) {
			t.Errorf("jobapi config does not list %s", s.Env)
		}
	}
}

func TestUnknownCommandAndBadConfig(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"frobnicate"}, env(nil), &out, &out); err == nil {
		t.Error("unknown command accepted")
	}
	err := run(context.Background(), []string{"serve"}, env(map[string]string{"JOBAPI_ACK_TTL": "fast"}), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "JOBAPI_ACK_TTL") {
		t.Errorf("bad JOBAPI_ACK_TTL: %v, want an error naming it", err)
	}
}

func TestMigrateVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	e := env(map[string]string{"JOBAPI_DATABASE_URL": testenv.DatabaseURL(t)})
	if err := run(context.Background(), []string{"migrate", "up"}, e, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`schema version \d+ \(dirty: false\)`).MatchString(out.String()) {
		t.Errorf("migrate up printed %q", out.String())
	}
}

// `jobapi dev` is README's one command: it must come up, print a working runner token and
// curl examples, serve them, and stop cleanly.
func TestDevServesAndStops(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	checkDev(t, env(map[string]string{
		"JOBAPI_DATABASE_URL": testenv.DatabaseURL(t),
		"JOBAPI_REDIS_URL":    fmt.Sprintf("redis://%s/%d", rdb.Options().Addr, rdb.Options().DB),
		"JOBAPI_LISTEN_ADDR":  "127.0.0.1:0",
		// A key space of this test's own (testenv deletes it afterwards).
		"JOBAPI_REDIS_KEY_PREFIX": prefix,
	}))
}

// A JOBAPI_DATABASE_URL that does not answer is replaced by a throwaway Postgres, which
// the instance then uses (it once migrated the URL that did not answer, and failed).
func TestDevReplacesADatabaseThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	out := checkDev(t, env(map[string]string{
		"JOBAPI_DATABASE_URL":     "postgres://nobody@127.0.0.1:1/nothing?sslmode=disable&connect_timeout=2",
		"JOBAPI_REDIS_URL":        fmt.Sprintf("redis://%s/%d", rdb.Options().Addr, rdb.Options().DB),
		"JOBAPI_LISTEN_ADDR":      "127.0.0.1:0",
		"JOBAPI_REDIS_KEY_PREFIX": prefix,
	}))
	if !strings.Contains(out, "JOBAPI_DATABASE_URL does not answer") {
		t.Errorf("dev did not say it replaced the database:\n%s", out)
	}
	// initdb's and Postgres's own output went to the log file it named, not to the terminal.
	if strings.Contains(out, "initdb") && !strings.Contains(out, "initdb takes") || strings.Contains(out, "database system is ready") ||
		strings.Contains(out, "The files belonging to this database system") {
		t.Errorf("dev printed the servers' output:\n%s", out)
	}
	if !regexp.MustCompile(`\[ *\d+\.\ds\] starting a throwaway Postgres`).MatchString(out) ||
		!regexp.MustCompile(`\[ *\d+\.\ds\] ready`).MatchString(out) {
		t.Errorf("dev did not say what it was doing as it started:\n%s", out)
	}
}

// checkDev runs `jobapi dev` with e until it serves, checks its readiness and printed runner
// token, stops it and returns what it printed.
func checkDev(t *testing.T, e func(string) string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, e, &out, &out) }()

	url := regexp.MustCompile(`running at (http://\S+)`)
	token := regexp.MustCompile(`token (glrt-\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	for !url.MatchString(out.String()) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("dev did not come up; printed:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	base := url.FindStringSubmatch(out.String())[1]
	tok := token.FindStringSubmatch(out.String())
	if m := regexp.MustCompile(`output[^:]*: (\S+servers\.log)`).FindStringSubmatch(out.String()); m != nil {
		if b, err := os.ReadFile(m[1]); err != nil || len(b) == 0 {
			t.Errorf("the servers' log %s: %d bytes, %v", m[1], len(b), err)
		}
	}
	checkDevRegistrationAndTwoPhase(t, base, out.String())
	if tok == nil || !strings.Contains(out.String(), "curl") {
		t.Errorf("dev printed no runner token or curl examples:\n%s", out.String())
	}
	resp, err := http.Get(base + "/-/readiness")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readiness of the dev server: %v %v", resp, err)
	}
	resp.Body.Close()
	if tok != nil {
		body := strings.NewReader(fmt.Sprintf(`{"token":%q,"system_id":"s_devtest"}`, tok[1]))
		resp, err := http.Post(base+"/api/v4/runners/verify", "application/json", body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("the printed demo runner token does not verify: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dev stopped with %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("dev did not stop after its context ended")
	}
	return out.String()
}

// checkDevRegistrationAndTwoPhase: the printed registration token registers a runner the
// way gitlab-runner register --registration-token does, and two-phase commit is on for
// every project and runner, as dev says.
func checkDevRegistrationAndTwoPhase(t *testing.T, base, out string) {
	t.Helper()
	m := regexp.MustCompile(`registration token: (\S+)`).FindStringSubmatch(out)
	if m == nil || len(m[1]) < 16 || !strings.Contains(out, "gitlab-runner register --non-interactive --url "+base+" --registration-token "+m[1]) {
		t.Errorf("dev printed no registration token (16 characters or more) and register command:\n%s", out)
		return
	}
	resp, err := http.Post(base+"/api/v4/runners", "application/json", strings.NewReader(fmt.Sprintf(`{"token":%q,"description":"registered"}`, m[1])))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("register with the printed registration token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if !strings.Contains(out, "two-phase commit: ON") {
		t.Errorf("dev did not say two-phase commit is on:\n%s", out)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v4/features", nil)
	req.Header.Set("PRIVATE-TOKEN", "jobapi-dev-admin-token")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var features []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&features); err != nil {
		t.Fatalf("GET /features: %v", err)
	}
	on := false
	for _, f := range features {
		on = on || f.Name == "allow_runner_job_acknowledgement" && f.State == "on"
	}
	if !on {
		t.Errorf("allow_runner_job_acknowledgement is not on globally: %+v", features)
	}
}
