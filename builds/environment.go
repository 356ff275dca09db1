package builds

import (
	"crypto/sha256"
	"encoding/hex"
	"math/big"
	"net/url"
	"regexp"
	"strings"
)

// Environment is a job's `environment:` from .gitlab-ci.yml once the pipeline is created:
// Name and URL have their variables expanded (GitLab expands them at pipeline creation),
// Slug and Tier are derived from the name when the file does not give a tier.
type Environment struct {
	Name   string `json:"name"`
	Slug   string `json:"slug"`
	URL    string `json:"url,omitempty"`
	Action string `json:"action"` // one of EnvironmentActions; start when not given
	OnStop string `json:"on_stop,omitempty"`
	Tier   string `json:"tier"` // one of EnvironmentTiers
}

// EnvironmentActions are `environment:action`'s values (GitLab's Entry::Environment).
var EnvironmentActions = []string{"start", "prepare", "stop", "verify", "access"}

// EnvironmentTiers are `environment:deployment_tier`'s values.
var EnvironmentTiers = []string{"production", "staging", "testing", "development", "other"}

var dashes = regexp.MustCompile(`-+`)

// EnvironmentSlug is CI_ENVIRONMENT_SLUG: lowercase letters, digits and dashes, starting
// with a letter, at most 24 bytes. A name that does not survive unchanged is cut to 17
// bytes and gets a 6-character suffix from its SHA-256, so that two names rarely share a
// slug. This is GitLab's predictable suffix (Gitlab::Slug::Environment before 16.x drew it
// at random when the environment row was created): jobapi derives the slug from the name
// alone, so every job of an environment agrees on it.
func EnvironmentSlug(name string) string {
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

// EnvironmentNameProblem says what is wrong with an expanded environment name, or "".
func EnvironmentNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxNameLength:
		return "is longer than 255 characters"
	case !environmentName.MatchString(name) || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/"):
		return "can contain only letters, digits, '-', '_', '/', '$', '{', '}', '.', and spaces, but it cannot start or end with '/'"
	}
	return ""
}

// EnvironmentURLProblem says what is wrong with an expanded environment url, or "": it
// must be an http or https URL with a host (GitLab's external_url validation). A page that
// links to it must never get a javascript: or data: URL from a pipeline's file.
func EnvironmentURLProblem(u string) string {
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
