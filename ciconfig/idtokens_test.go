package ciconfig

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// TestIDTokens: both aud forms, in file order; default: inherited unless the job has its
// own or inherit:default leaves it out; a trigger job takes none; aud keeps its variables
// for the mint.
func TestIDTokens(t *testing.T) {
	t.Parallel()
	res := mustCompile(t, `
default:
  id_tokens:
    VAULT_ID_TOKEN: {aud: https://vault.example.com}
own:
  script: x
  id_tokens:
    B_TOKEN: {aud: [https://b.example, $CI_SERVER_URL]}
    A_TOKEN: {aud: 'https://a.example/$CI_PROJECT_ID'}
inherits:
  script: x
opts_out:
  script: x
  inherit: {default: [image]}
bridge:
  trigger: {include: child.yml}
`, mainPush)
	want := map[string][]builds.IDToken{
		"own": {{Name: "B_TOKEN", Aud: []string{"https://b.example", "$CI_SERVER_URL"}, AudList: true},
			{Name: "A_TOKEN", Aud: []string{"https://a.example/$CI_PROJECT_ID"}}},
		"inherits": {{Name: "VAULT_ID_TOKEN", Aud: []string{"https://vault.example.com"}}},
		"opts_out": nil,
		"bridge":   nil,
	}
	for _, j := range res.Jobs {
		if !reflect.DeepEqual(j.IDTokens, want[j.Name]) {
			t.Errorf("%s: id_tokens %+v, want %+v", j.Name, j.IDTokens, want[j.Name])
		}
		if p := builds.PayloadOf(j); !reflect.DeepEqual(p.IDTokens, j.IDTokens) {
			t.Errorf("%s: the payload keeps %+v of %+v", j.Name, p.IDTokens, j.IDTokens)
		}
	}
}

// TestIDTokensInvalid: GitLab's messages for the forms it refuses.
func TestIDTokensInvalid(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"job: {script: x, id_tokens: [T]}\n":                           "jobs:job:id_tokens config should be a hash",
		"job: {script: x, id_tokens: {T: aud}}\n":                      "jobs:job:id_tokens:T config should be a hash",
		"job: {script: x, id_tokens: {T: {}}}\n":                       "jobs:job:id_tokens:T config missing required keys: aud",
		"job: {script: x, id_tokens: {T: {aud: a, sub: b}}}\n":         "jobs:job:id_tokens:T config contains unknown keys: sub",
		"job: {script: x, id_tokens: {T: {aud: 1}}}\n":                 "jobs:job:id_tokens:T aud should be an array of strings or a string",
		"job: {script: x, id_tokens: {T: {aud: [a, [b]]}}}\n":          "jobs:job:id_tokens:T aud should be an array of strings or a string",
		"job: {script: x, id_tokens: {T: {aud: {a: b}}}}\n":            "jobs:job:id_tokens:T aud should be an array of strings or a string",
		"default: {id_tokens: {T: {}}}\njob: {script: x}\n":            "default:id_tokens:T config missing required keys: aud",
		"job: {trigger: {include: c.yml}, id_tokens: {T: {aud: a}}}\n": "jobs:job config contains unknown keys: id_tokens",
	} {
		if e := compileError(t, src); !strings.Contains(e.Error(), want) {
			t.Errorf("%q:\n got %s\nwant %s", src, e.Error(), want)
		}
	}
}
