// Package gitremote shows a project's git remote without its credentials. It knows no
// jobapi package: the API, the web UI, webhook payloads and git's own error messages
// (cisource) all show remotes through it.
package gitremote

import (
	"net/url"
	"strings"
)

// Redact hides the credentials of a remote. An http(s) username is hidden too: it is
// often the token itself (https://<token>@host/…). Other schemes keep the user (ssh://git@…)
// and lose only a password.
func Redact(s string) string {
	if !strings.Contains(s, "://") {
		// scp-like user:password@host:path: git takes "user:password" for the ssh user.
		if at := strings.Index(s, "@"); at > 0 {
			if user, _, ok := strings.Cut(s[:at], ":"); ok && !strings.Contains(s[:at], "/") {
				return user + ":*****" + s[at:]
			}
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		// Unparseable yet stored (never, as validated): show nothing of it.
		return "*****"
	}
	if u.User == nil {
		return s
	}
	_, hasPassword := u.User.Password()
	switch {
	case u.Scheme == "https" || u.Scheme == "http":
		if hasPassword {
			u.User = url.UserPassword("*****", "*****")
		} else {
			u.User = url.User("*****")
		}
	case hasPassword:
		u.User = url.UserPassword(u.User.Username(), "*****")
	default:
		return s
	}
	// url.String escapes the asterisks; put them back so the redaction reads plainly.
	return strings.ReplaceAll(u.String(), "%2A", "*")
}
