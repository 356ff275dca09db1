package builds

import (
	"fmt"
	"strings"
)

// A pipeline's ref, sha and before_sha reach git (include: local, rules:changes and
// rules:exists read the project's repository at them, and the runner fetches them), so they
// are checked where they come in, before anything compiles or fetches: a ref that git could
// read as an option (--upload-pack=<command>) ran that command on the server.

// CheckRefName returns a *ValidationError naming field unless s is a ref name that git's
// check-ref-format accepts (one level allowed, refs/heads/… and refs/tags/… too), with
// neither the whole name nor a component starting with '-', as git check-ref-format
// --branch refuses, so that it can never be taken for an option.
func CheckRefName(field, s string) error {
	if why := RefNameProblem(s); why != "" {
		return invalid("%s %.60q is not a valid git ref name: %s", field, s, why)
	}
	return nil
}

// RefNameProblem says why git's check-ref-format (with CheckRefName's additions) refuses s
// as a ref name, or "".
func RefNameProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > MaxNameLength:
		return fmt.Sprintf("it is longer than %d characters", MaxNameLength)
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

// CheckSHA returns a *ValidationError naming field unless s is a full commit sha.
func CheckSHA(field, s string) error {
	if !shaPattern.MatchString(s) {
		return invalid("%s must be 40 lowercase hex characters", field)
	}
	return nil
}

// CheckRevisions checks a pipeline's ref, sha and before_sha as a request gives them
// ("" is a default to come: the default branch, or no commit); the first wrong one is a
// *ValidationError that names it.
func CheckRevisions(ref, sha, beforeSHA string) error {
	if ref != "" {
		if err := CheckRefName("ref", ref); err != nil {
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
