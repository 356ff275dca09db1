// Package projecttest_test checks projects over real HTTP against real Postgres and Redis:
// their API, variables, what a job of a project gets, environments, resource groups,
// protected refs and the ref_protected runners that take only their jobs.
package projecttest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
