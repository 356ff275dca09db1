// Package gitlabrunner_test checks what jobapi ships for the real gitlab-runner: the
// docker-compose.yml fleet (by reading it: no Docker engine runs here), and, when
// GITLAB_RUNNER_BIN names a gitlab-runner binary (v17.9.3 is what runnerclient mirrors), that
// binary against a real jobapi: the compose entrypoint (register, run a job, unregister) and
// each command of docs/runners.md's runner-commands table. Without it those tests say so and skip.
package gitlabrunner_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
