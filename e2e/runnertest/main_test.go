// Package runnertest_test drives jobapi as gitlab-runner does, over real HTTP against real Postgres and
// Redis (one database and key prefix per test): the runner protocol in the legacy (one-phase)
// flow, registration and the runner commands, updates and their fast path across replicas,
// concurrent runners, and the ID tokens a job carries.
package runnertest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
