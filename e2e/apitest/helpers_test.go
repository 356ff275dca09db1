// Package apitest_test drives jobapi's legacy (one-phase) runner flow and its operator API
// over real HTTP, against real Postgres and Redis (one database and key prefix per test).
package apitest_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
