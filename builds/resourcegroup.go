package builds

import (
	"strings"

	"github.com/jobapi/jobapi/environment"
)

// A resource group (`resource_group:`) lets at most one job of it run at a time across the
// project's pipelines (legend ⁴ of the transition table); its API is builds/resourcegroups.

// ResourceGroupKeyProblem says what is wrong with a group's key, "" when nothing: GitLab
// validates keys as it does environment names.
func ResourceGroupKeyProblem(key string) string {
	if strings.TrimSpace(key) == "" {
		return "is empty"
	}
	return environment.NameProblem(key)
}
