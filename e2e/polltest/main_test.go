// Package polltest_test checks how runners' polls are answered across replicas, against real
// Postgres and Redis: the long poll's wake-ups, idle polls answered without Postgres, the
// claim's single flight, and polls after a bump answered from the empty-profile record.
package polltest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
