package artifacts

import (
	"strings"
	"testing"
	"time"
)

// expire_in as .gitlab-ci.yml users write it (GitLab's examples for artifacts:expire_in).
func TestParseExpireIn(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{
		"42":                       42 * time.Second,
		"42 seconds":               42 * time.Second,
		"3 mins 4 sec":             3*time.Minute + 4*time.Second,
		"2 hrs 20 min":             2*time.Hour + 20*time.Minute,
		"2h20min":                  2*time.Hour + 20*time.Minute,
		"6 mos 1 day":              181 * day,
		"47 yrs 6 mos and 4d":      (47*365 + 6*30 + 4) * day,
		"3 weeks and 2 days":       23 * day,
		"30 days":                  30 * day,
		"1 week":                   7 * day,
		"1.5 hours":                90 * time.Minute,
		"1 Day":                    day,
		"  1 day, 2 hours ":        26 * time.Hour,
		"1:30:00":                  90 * time.Minute,
		"2:00":                     2 * time.Minute,
		"1 year":                   365 * day,
		"1 hour 30 minutes 5 secs": time.Hour + 30*time.Minute + 5*time.Second,
		"0":                        0,
	} {
		got, err := ParseExpireIn(in)
		if err != nil || got.Never || got.After != want {
			t.Errorf("%q: %+v, %v; want %v", in, got, err, want)
		}
	}
	if got, err := ParseExpireIn("never"); err != nil || !got.Never || got.At(time.Now()) != nil {
		t.Errorf("never: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "soon", "1 fortnight", "-1 day", "day", "1..5 h", "1:2:3:4:5",
		"1::2", "300 years", strings.Repeat("9", 400)} {
		if got, err := ParseExpireIn(bad); err == nil {
			t.Errorf("%q: accepted as %+v", bad, got)
		}
	}
}
