package gitlabrunner_test

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/server"
)

// composeFile is the part of docker-compose.yml this test reads.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image           string                                `yaml:"image"`
	Build           any                                   `yaml:"build"`
	Entrypoint      []string                              `yaml:"entrypoint"`
	Environment     map[string]string                     `yaml:"environment"`
	Volumes         []string                              `yaml:"volumes"`
	DependsOn       map[string]struct{ Condition string } `yaml:"depends_on"`
	Healthcheck     map[string]any                        `yaml:"healthcheck"`
	Init            bool                                  `yaml:"init"`
	StopSignal      string                                `yaml:"stop_signal"`
	StopGracePeriod string                                `yaml:"stop_grace_period"`
}

// composeVar is a compose interpolation: ${NAME}, ${NAME:?message}, ${NAME:-default}.
var composeVar = regexp.MustCompile(`^\$\{([A-Z0-9_]+)(?::[?-].*)?\}$`)

// docker-compose.yml cannot be run here (no Docker engine), so it is checked by reading:
// it parses, every jobapi setting it sets exists, the gitlab-runner service is the official
// image pinned to the version runnerclient mirrors, shares jobapi's registration token
// through one compose variable, reaches jobapi at its service name and port, waits for it to
// be healthy, mounts the entrypoint it runs (valid bash), and has time to drain and
// unregister before compose kills it.
func TestComposeFleet(t *testing.T) {
	root := jobapitest.ModuleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "redis", "jobapi", "gitlab-runner"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
	}
	jobapi, runner := c.Services["jobapi"], c.Services["gitlab-runner"]

	known := map[string]bool{}
	for _, s := range server.Settings {
		known[s.Env] = true
	}
	for _, k := range server.ObjectStoreCredentialEnv {
		known[k] = true
	}
	for k := range jobapi.Environment {
		if !known[k] {
			t.Errorf("jobapi sets %s, which is not a jobapi setting", k)
		}
	}

	if runner.Image != "gitlab/gitlab-runner:v17.9.3" && runner.Image != "gitlab/gitlab-runner:alpine-v17.9.3" {
		t.Errorf("gitlab-runner image %q, want the official image at v17.9.3", runner.Image)
	}
	regVar := func(service, value string) string {
		m := composeVar.FindStringSubmatch(value)
		if m == nil {
			t.Errorf("%s: registration token %q is not a compose variable", service, value)
			return ""
		}
		return m[1]
	}
	if a, b := regVar("jobapi", jobapi.Environment["JOBAPI_RUNNER_REGISTRATION_TOKEN"]),
		regVar("gitlab-runner", runner.Environment["REGISTRATION_TOKEN"]); a == "" || a != b {
		t.Errorf("jobapi's registration token comes from ${%s}, the runner's from ${%s}: they must be one variable", a, b)
	}
	u, err := url.Parse(runner.Environment["CI_SERVER_URL"])
	_, port, _ := strings.Cut(jobapi.Environment["JOBAPI_LISTEN_ADDR"], ":")
	if err != nil || u.Scheme != "http" || u.Hostname() != "jobapi" || u.Port() != port {
		t.Errorf("gitlab-runner's CI_SERVER_URL %q does not reach the jobapi service on its port %q", runner.Environment["CI_SERVER_URL"], port)
	}
	if runner.DependsOn["jobapi"].Condition != "service_healthy" || jobapi.Healthcheck == nil {
		t.Errorf("gitlab-runner must wait for a healthy jobapi: depends_on %+v, jobapi healthcheck %v", runner.DependsOn, jobapi.Healthcheck)
	}

	// The entrypoint runs from the mounted folder, and is bash that parses.
	if len(runner.Entrypoint) != 2 || runner.Entrypoint[0] != "/bin/bash" {
		t.Fatalf("gitlab-runner entrypoint %q, want /bin/bash and the mounted script", runner.Entrypoint)
	}
	script := ""
	for _, v := range runner.Volumes {
		host, inContainer, _ := strings.Cut(strings.TrimSuffix(v, ":ro"), ":")
		if rest, ok := strings.CutPrefix(runner.Entrypoint[1], inContainer+"/"); ok {
			script = filepath.Join(root, host, rest)
		}
	}
	if script == "" {
		t.Fatalf("no volume of gitlab-runner (%q) holds its entrypoint %s", runner.Volumes, runner.Entrypoint[1])
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", script, err, out)
	}
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"register --non-interactive", "--registration-token", "--executor shell",
		"unregister --config \"$config\" --all-runners", "trap stop TERM INT QUIT"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the entrypoint does not %q", want)
		}
	}

	// Draining (DRAIN_TIMEOUT), the forced stop after it and unregister must end before
	// compose's SIGKILL at stop_grace_period; and the entrypoint, not tini, gets the signal.
	drain, err := strconv.Atoi(runner.Environment["DRAIN_TIMEOUT"])
	grace, gerr := time.ParseDuration(runner.StopGracePeriod)
	if err != nil || gerr != nil || grace < time.Duration(drain)*time.Second+45*time.Second {
		t.Errorf("stop_grace_period %q leaves too little after DRAIN_TIMEOUT %q for the forced stop and unregister",
			runner.StopGracePeriod, runner.Environment["DRAIN_TIMEOUT"])
	}
	if !runner.Init || !slices.Contains([]string{"SIGTERM", "SIGQUIT", "SIGINT"}, runner.StopSignal) {
		t.Errorf("gitlab-runner: init %v, stop_signal %q; want tini and a signal the entrypoint traps", runner.Init, runner.StopSignal)
	}
}
