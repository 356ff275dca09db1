package ciconfig

import "github.com/jobapi/jobapi/builds"

// parseIDTokens reads `id_tokens: {NAME: {aud: <string or list of strings>}}` (GitLab's
// Entry::IdToken in a ComposableHash), in a job or in `default:`, with GitLab's messages.
// aud keeps its variables: they are expanded when the token is minted.
func parseIDTokens(v *val, job, key string) ([]builds.IDToken, error) {
	if v.kind != vMap {
		return nil, errAt(v, job, key, "config should be a hash")
	}
	out := make([]builds.IDToken, 0, len(v.keys))
	for i, name := range v.keys {
		tv, tkey := v.vals[i], key+":"+name
		if tv.kind != vMap {
			return nil, errAt(tv, job, tkey, "config should be a hash")
		}
		if err := checkKeys(tv, job, tkey, []string{"aud"}, nil); err != nil {
			return nil, err
		}
		aud := tv.get("aud")
		if aud == nil {
			return nil, errAt(tv, job, tkey, "config missing required keys: aud")
		}
		t := builds.IDToken{Name: name}
		switch aud.kind {
		case vString:
			t.Aud = []string{aud.text}
		case vSeq:
			t.AudList, t.Aud = true, make([]string, 0, len(aud.vals))
			for _, a := range aud.vals {
				if a.kind != vString {
					return nil, errAt(a, job, tkey, "aud should be an array of strings or a string")
				}
				t.Aud = append(t.Aud, a.text)
			}
		default:
			return nil, errAt(aud, job, tkey, "aud should be an array of strings or a string")
		}
		out = append(out, t)
	}
	return out, nil
}

// ExpandVariables is GitLab's ExpandVariables.expand: $NAME, ${NAME} and %NAME% replaced by
// their values, an undefined one by nothing. The job payload expands id_tokens' aud with it.
func ExpandVariables(s string, lookup func(string) (string, bool)) string {
	return expandVariables(s, lookup)
}
