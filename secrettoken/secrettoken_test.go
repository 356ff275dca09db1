package secrettoken

import "testing"

func TestTokens(t *testing.T) {
	const prefix = "glrt-"
	a, b := New(prefix), New(prefix)
	if a == b || len(a) != len(prefix)+32 {
		t.Fatalf("tokens %q %q: want distinct, %d characters", a, b, len(prefix)+32)
	}
	if !Matches(a, Hash(a)) || Matches(b, Hash(a)) || Matches("", Hash("")) {
		t.Error("Matches must accept only the token whose hash is stored")
	}
}
