// Package api holds jobapi's wire types: the GitLab v4 runner API shapes that gitlab-runner
// sends and expects (see shared/runner-wire-format.md), the operator API shapes, and the
// error envelope. They mirror openapi.yaml; the contract test keeps both in step.
package api

// Error is every error body: {"message": "..."}.
type Error struct {
	Message string `json:"message"`
}
