package handlers

import (
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// adminUser is GitLab's user for the holder of the admin token, the bootstrap credential
// (no row in users: GitLab's user 1, the administrator).
func adminUser(base string) api.User {
	return api.User{ID: builds.AdminUserID, Username: builds.AdminUsername, Name: builds.AdminName, State: "active",
		WebURL: base + "/admin", IsAdmin: true}
}

// getVersion is GitLab's GET /version, with jobapi's own version and the commit it was
// built from, as the Go toolchain stamped them into the binary.
func (h *Handler) getVersion(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, buildVersion())
	return nil
}

// buildVersion reads the module version and VCS revision of the running binary; a build
// without them (go run, test binaries) is a development version, its commit unstamped.
func buildVersion() api.Version {
	v := api.Version{Version: "0.0.0-dev", Revision: "unstamped"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		v.Version = strings.TrimPrefix(mv, "v") // GitLab's versions have no v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			v.Revision = s.Value[:min(len(s.Value), 12)]
		}
	}
	return v
}
