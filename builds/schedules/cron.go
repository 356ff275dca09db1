package schedules

import (
	"fmt"
	"strings"
	"time"
	// The zone database is embedded so that cron_timezone means the same on a host or
	// image without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/jobapi/jobapi/builds"
)

// cronParser reads GitLab's cron syntax (Fugit's crontab form): five fields, minute hour
// day-of-month month day-of-week, with lists, ranges, steps and names (JAN, MON), and the
// @yearly/@annually/@monthly/@weekly/@daily/@midnight/@hourly shorthands.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxCron bounds the cron text; GitLab's column is a varchar(255).
const maxCron = 255

// Timing is a parsed cron in its time zone.
type Timing struct {
	spec *cron.SpecSchedule
}

// ParseTiming reads a cron and its time zone (an IANA name such as UTC or Europe/Berlin;
// "" is UTC). A bad one is a *builds.ValidationError naming the field.
func ParseTiming(expr, zone string) (Timing, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return Timing{}, invalid("cron is missing")
	case len(expr) > maxCron:
		return Timing{}, invalid("cron is longer than %d characters", maxCron)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Timing{}, invalid("cron %.60q is invalid syntax: give the time zone in cron_timezone", expr)
	case strings.HasPrefix(expr, "@every"):
		return Timing{}, invalid("cron %.60q is invalid syntax: @every is not cron; write the minutes and hours", expr)
	}
	loc, err := ParseZone(zone)
	if err != nil {
		return Timing{}, err
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return Timing{}, invalid("cron %.60q is invalid syntax: %v", expr, err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return Timing{}, invalid("cron %.60q is invalid syntax", expr)
	}
	spec.Location = loc
	if spec.Next(time.Now()).IsZero() {
		// robfig's Next gives up after five years: a date that never comes (30 February).
		return Timing{}, invalid("cron %.60q never runs", expr)
	}
	return Timing{spec: spec}, nil
}

// ParseZone reads cron_timezone: an IANA zone name; "" is UTC.
func ParseZone(zone string) (*time.Location, error) {
	if zone == "" {
		return time.UTC, nil
	}
	if len(zone) > 100 || strings.ContainsAny(zone, "\x00\\") || zone == "Local" {
		return nil, invalid("cron_timezone %.60q is not a time zone: give an IANA name such as UTC or Europe/Berlin", zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, invalid("cron_timezone %.60q is not a time zone: give an IANA name such as UTC or Europe/Berlin", zone)
	}
	return loc, nil
}

// Next is the first time the cron fires strictly after t, in its zone (as an instant).
func (c Timing) Next(t time.Time) time.Time {
	return c.spec.Next(t).UTC()
}

// Valid reports whether the timing was parsed (the zero Timing fires never).
func (c Timing) Valid() bool { return c.spec != nil }

func invalid(format string, args ...any) error {
	return &builds.ValidationError{Msg: fmt.Sprintf(format, args...)}
}
