// Package hooktest_test checks project webhooks end to end: the hooks API (GitLab's, also
// through python-gitlab), deliveries of pipeline, job and push events to real HTTP receivers
// started by the tests, retries and the delivery log, two replicas sending each delivery
// once, and commit statuses posted to receivers shaped like GitHub, Gitea and GitLab.
package hooktest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
