package schedules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

func TestTimingNext(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		cron, zone, from, want string
	}{
		{"0 2 * * *", "UTC", "2026-12-03T01:59:59Z", "2026-12-03T02:00:00Z"},
		// Strictly after: a schedule due now is next due tomorrow.
		{"0 2 * * *", "", "2026-12-03T02:00:00Z", "2026-12-04T02:00:00Z"},
		// 02:00 in Berlin is 01:00 UTC in winter.
		{"0 2 * * *", "Europe/Berlin", "2026-12-03T00:00:00Z", "2026-12-03T01:00:00Z"},
		// ... and 00:00 UTC in summer.
		{"0 2 * * *", "Europe/Berlin", "2026-07-01T00:30:00Z", "2026-07-02T00:00:00Z"},
		{"*/15 * * * *", "UTC", "2026-12-03T10:07:00Z", "2026-12-03T10:15:00Z"},
		{"30 9 * * MON-FRI", "America/New_York", "2026-12-05T00:00:00Z", "2026-12-07T14:30:00Z"}, // Saturday → Monday
		{"0 0 1 JAN *", "Asia/Tokyo", "2026-12-03T00:00:00Z", "2026-12-31T15:00:00Z"},
		{"@daily", "UTC", "2026-12-03T10:00:00Z", "2026-12-04T00:00:00Z"},
		{"@hourly", "Asia/Kolkata", "2026-12-03T10:10:00Z", "2026-12-03T10:30:00Z"}, // UTC+5:30
	}
	for _, c := range cases {
		timing, err := ParseTiming(c.cron, c.zone)
		if err != nil {
			t.Errorf("ParseTiming(%q, %q): %v", c.cron, c.zone, err)
			continue
		}
		if got := timing.Next(at(c.from)); !got.Equal(at(c.want)) || got.Location() != time.UTC {
			t.Errorf("%q in %q after %s: %s, want %s", c.cron, c.zone, c.from, got, c.want)
		}
	}
}

// A bad cron or zone is a validation error (a 400) that names the field.
func TestParseTimingRefusesBadInput(t *testing.T) {
	t.Parallel()
	cases := []struct{ cron, zone, field, says string }{
		{"", "UTC", "cron ", "missing"},
		{"* * * *", "UTC", "cron ", "invalid syntax"},
		{"61 * * * *", "UTC", "cron ", "invalid syntax"},
		{"* * * * * *", "UTC", "cron ", "invalid syntax"}, // seconds: not GitLab's syntax
		{"0 0 30 2 *", "UTC", "cron ", "never runs"},
		{"@every 5m", "UTC", "cron ", "@every"},
		{"CRON_TZ=UTC 0 * * * *", "UTC", "cron ", "cron_timezone"},
		{"nonsense", "UTC", "cron ", "invalid syntax"},
		{strings.Repeat("1", 300), "UTC", "cron ", "longer than"},
		{"0 * * * *", "Mars/Olympus", "cron_timezone ", "IANA"},
		{"0 * * * *", "../../etc/passwd", "cron_timezone ", "IANA"},
		{"0 * * * *", "Local", "cron_timezone ", "IANA"},
	}
	for _, c := range cases {
		_, err := ParseTiming(c.cron, c.zone)
		var verr *builds.ValidationError
		if !errors.As(err, &verr) {
			t.Errorf("ParseTiming(%.40q, %q) = %v, want a ValidationError", c.cron, c.zone, err)
			continue
		}
		if !strings.HasPrefix(verr.Msg, c.field) || !strings.Contains(verr.Msg, c.says) {
			t.Errorf("ParseTiming(%.40q, %q): %q, want it to start with %q and say %q", c.cron, c.zone, verr.Msg, c.field, c.says)
		}
	}
}
