// Package userstest_test checks users and personal access tokens end to end, against real
// replicas on real Postgres and Redis: an administrator creates users and their tokens, the
// tokens act as their users through PRIVATE-TOKEN and Authorization: Bearer within their
// scopes, and a revoked, expired or rotated token stops working on every replica at once;
// refused tokens are throttled per address and per user; python-gitlab drives the same calls.
package userstest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
