// Package operatortest_test checks the operator API over real HTTP against real Postgres and
// Redis: its authentication, runners, jobs (lists, cancel, force cancel, retry, events),
// commit statuses, artifacts by ref, user and version, python-gitlab's lists, and hostile
// input to every endpoint (a 4xx with a JSON message that writes nothing).
package operatortest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
