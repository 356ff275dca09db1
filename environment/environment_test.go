package environment

import (
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, want string }{
		{"staging", "staging"}, // a valid slug already: kept
		{"production-eu", "production-eu"},
		// Changed by slugging: cut to 17, a dash, GitLab's predictable suffix (the base-36
		// tail of the name's SHA-256; "l58kaf" matches GitLab's for this name).
		{"deployment-review/TEST-branch-with-really-long-name", "deployment-review-l58kaf"},
		{"review/feature-login-page", "review-feature-lo-kxm5zt"},
		{"Staging", "staging-" + Slug("Staging")[8:]}, // upper case changes it
		{"1st", "env-1st-" + Slug("1st")[8:]},         // must start with a letter
	} {
		got := Slug(c.name)
		if got != c.want || len(got) > 24 {
			t.Errorf("Slug(%q) = %q, want %q (at most 24 bytes)", c.name, got, c.want)
		}
	}
	// Upper case changes the name, and a slug starts with a letter: both get a suffix.
	for name, prefix := range map[string]string{"Staging": "staging-", "1st": "env-1st-"} {
		if got := Slug(name); !strings.HasPrefix(got, prefix) || len(got) != len(prefix)+6 {
			t.Errorf("Slug(%q) = %q, want %q and a 6-character suffix", name, got, prefix)
		}
	}
	if a, b := Slug("review/a_b"), Slug("review/a-b"); a == b {
		t.Errorf("two names that slug alike share %q; the suffix should tell them apart", a)
	}
}

func TestGuessTier(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"production": "production", "prod-eu": "production", "live": "production",
		"staging": "staging", "stage": "staging", "preprod": "staging", "demo": "staging",
		"test": "testing", "qc": "testing",
		"review/feature-x": "development", "dev": "development", "trunk": "development",
		"sandbox": "other",
	} {
		if got := GuessTier(name); got != want {
			t.Errorf("GuessTier(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestNameProblem(t *testing.T) {
	t.Parallel()
	for name, bad := range map[string]bool{
		"review/feature-x": false, "Production EU": false, "${X}.y_z": false,
		"": true, "/review": true, "review/": true, "review:x": true, "ümlaut": true,
	} {
		if got := NameProblem(name) != ""; got != bad {
			t.Errorf("NameProblem(%q) = %q, want a problem: %v", name, NameProblem(name), bad)
		}
	}
}
