// Package contract_test checks openapi.yaml against a real jobapi replica: every request the
// scenario sends and every response it gets is validated against the document, and every
// route of handlers/routes.go must be described in it.
package contract_test

import (
	"testing"

	"github.com/jobapi/jobapi/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
