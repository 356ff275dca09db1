// Package gitref holds git's rules for the refs and commit ids that requests, webhooks and
// stored pipelines hand to git, and GitLab's slug of a ref. It knows no jobapi package:
// builds, the API, pushes and the pipeline compiler all check with it.
//
// A pipeline's ref, sha and before_sha reach git (include: local, rules:changes and
// rules:exists read the project's repository at them, and the runner fetches them), so they
// are checked where they come in, before anything compiles or fetches: a ref that git could
// read as an option (--upload-pack=<command>) ran that command on the server.
package gitref

import (
	"fmt"
	"regexp"
	"strings"
)

// maxLength is the longest ref jobapi takes: the width of the columns that store one
// (builds.MaxNameLength).
const maxLength = 255

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Error is a ref or a commit id refused; Msg names the request's field and is for the
// client as it is (the API answers it with a 400, services pass it on as their own
// validation error).
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

// CheckName returns an *Error naming field unless s is a ref name that git's
// check-ref-format accepts (one level allowed, refs/heads/… and refs/tags/… too), with
// neither the whole name nor a component starting with '-', as git check-ref-format
// --branch refuses, so that it can never be taken for an option.
func CheckName(field, s string) error {
	if why := NameProblem(s); why != "" {
		return invalid("%s %.60q is not a valid git ref name: %s", field, s, why)
	}
	return nil
}

// NameProblem says why git's check-ref-format (with CheckName's additions) refuses s as a
// ref name, or "".
func NameProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > maxLength:
		return fmt.Sprintf("it is longer than %d characters", maxLength)
	case s == "@":
		return "it is '@'"
	case strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/"):
		return "it starts or ends with '/'"
	case strings.Contains(s, "//"):
		return "it contains '//'"
	case strings.Contains(s, ".."):
		return "it contains '..'"
	case strings.Contains(s, "@{"):
		return "it contains '@{'"
	case strings.HasSuffix(s, "."):
		return "it ends with '.'"
	}
	for _, r := range s {
		switch {
		case r < ' ' || r == 0x7f:
			return "it contains a control character"
		case r == ' ':
			return "it contains a space"
		case strings.ContainsRune("~^:?*[\\", r):
			return fmt.Sprintf("it contains %q", r)
		}
	}
	for _, c := range strings.Split(s, "/") {
		switch {
		case strings.HasPrefix(c, "-"):
			return "it starts with '-'"
		case strings.HasPrefix(c, "."):
			return "a part starts with '.'"
		case strings.HasSuffix(c, ".lock"):
			return "a part ends with '.lock'"
		}
	}
	return ""
}

// CheckSHA returns an *Error naming field unless s is a full commit sha.
func CheckSHA(field, s string) error {
	if !shaPattern.MatchString(s) {
		return invalid("%s must be 40 lowercase hex characters", field)
	}
	return nil
}

// CheckRevisions checks a pipeline's ref, sha and before_sha as a request gives them
// ("" is a default to come: the default branch, or no commit); the first wrong one is an
// *Error that names it.
func CheckRevisions(ref, sha, beforeSHA string) error {
	if ref != "" {
		if err := CheckName("ref", ref); err != nil {
			return err
		}
	}
	if sha != "" {
		if err := CheckSHA("sha", sha); err != nil {
			return err
		}
	}
	if beforeSHA != "" {
		return CheckSHA("before_sha", beforeSHA)
	}
	return nil
}

// Slug is GitLab's slug of a ref or name (CI_COMMIT_REF_SLUG, CI_JOB_NAME_SLUG,
// CI_PROJECT_PATH_SLUG): lowercased, every other character a dash, at most 63, no dash at
// either end.
func Slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	out := b.String()
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "-")
}
