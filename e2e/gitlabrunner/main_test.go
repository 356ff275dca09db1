// Package gitlabrunner_test checks what jobapi ships for the real gitlab-runner: the
// docker-compose.yml fleet (by reading it: no Docker engine runs here), and, when
// GITLAB_RUNNER_BIN names a gitlab-runner binary, its entrypoint driving that binary against
// a real jobapi: register, run a job, unregister.
package gitlabrunner_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
