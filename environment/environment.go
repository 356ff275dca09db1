// Package environment holds GitLab's rules for a job's `environment:` that need nothing of
// a build: which names and URLs are valid, the slug (CI_ENVIRONMENT_SLUG) and the tier a
// name implies, and the values `action` and `deployment_tier` take. It knows no jobapi
// package: the compiler checks a file with it, builds a resource group's key (GitLab checks
// those as environment names), and the API and the web UI an environment's link. The
// environment a job carries, builds.Environment, stays with the job in builds.
package environment

import (
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"net/url"
	"regexp"
	"strings"
)

// maxNameLength is the longest name jobapi takes: the width of the columns that store one
// (builds.MaxNameLength).
const maxNameLength = 255

// Actions are `environment:action`'s values (GitLab's Entry::Environment).
var Actions = []string{"start", "prepare", "stop", "verify", "access"}

// Tiers are `environment:deployment_tier`'s values.
var Tiers = []string{"production", "staging", "testing", "development", "other"}

var dashes = regexp.MustCompile(`-+`)

// Slug is CI_ENVIRONMENT_SLUG: lowercase letters, digits and dashes, starting
// with a letter, at most 24 bytes. A name that does not survive unchanged is cut to 17
// bytes and gets a 6-character suffix from its SHA-256, so that two names rarely share a
// slug. This is GitLab's predictable suffix (Gitlab::Slug::Environment before 16.x drew it
// at random when the environment row was created): jobapi derives the slug from the name
// alone, so every job of an environment agrees on it.
func Slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	slug := b.String()
	if slug == "" || slug[0] < 'a' || slug[0] > 'z' {
		slug = "env-" + slug
	}
	slug = dashes.ReplaceAllString(slug, "-")
	if len(slug) <= 24 && slug == name {
		return strings.TrimSuffix(slug, "-")
	}
	if len(slug) > 17 {
		slug = slug[:17]
	}
	if !strings.HasSuffix(slug, "-") {
		slug += "-"
	}
	sum := sha256.Sum256([]byte(name))
	n, _ := new(big.Int).SetString(hex.EncodeToString(sum[:]), 16)
	b36 := n.Text(36)
	if len(b36) > 6 {
		b36 = b36[len(b36)-6:]
	}
	return slug + b36
}

// GuessTier is GitLab's tier for an environment whose file gives no deployment_tier
// (Environment#guess_tier), the first pattern that matches the name.
func GuessTier(name string) string {
	for _, t := range tierGuesses {
		if t.re.MatchString(name) {
			return t.tier
		}
	}
	return "other"
}

var tierGuesses = []struct {
	re   *regexp.Regexp
	tier string
}{
	{regexp.MustCompile(`(?i)(dev|review|trunk)`), "development"},
	{regexp.MustCompile(`(?i)(test|qc)`), "testing"},
	{regexp.MustCompile(`(?i)(st(a|)g|mod(e|)l|pre|demo|non)`), "staging"},
	{regexp.MustCompile(`(?i)(pr(o|)d|live)`), "production"},
}

// environmentName is what GitLab accepts as an environment's name once expanded
// (Gitlab::Regex.environment_name_regex): letters, digits, spaces and - _ / $ { } . ,
// not starting or ending with a slash.
var environmentName = regexp.MustCompile(`^[a-zA-Z0-9_/${}. -]+$`)

// NameProblem says what is wrong with an expanded environment name, or "".
func NameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > maxNameLength:
		return "is longer than 255 characters"
	case !environmentName.MatchString(name) || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return "can contain only letters, digits, '-', '_', '/', '$', '{', '}', '.', and spaces, but it cannot start or end with '/'"
	}
	return ""
}

// URLProblem says what is wrong with an expanded environment url, or "": it
// must be an http or https URL with a host (GitLab's external_url validation). A page that
// links to it must never get a javascript: or data: URL from a pipeline's file.
func URLProblem(u string) string {
	if !IsWebURL(u) {
		return "is not an http or https URL with a host"
	}
	return ""
}

// IsWebURL reports whether s is an absolute http or https URL with a host, with no
// whitespace or control character in it (browsers drop those, which changes what a link
// points at).
func IsWebURL(s string) bool {
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return false
	}
	scheme := strings.ToLower(u.Scheme)
	return scheme == "http" || scheme == "https"
}
