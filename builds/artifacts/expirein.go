package artifacts

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ExpireIn is how long an artifact is kept, as `artifacts:expire_in` says it; Never keeps
// it until deleted.
type ExpireIn struct {
	Never bool
	After time.Duration
}

// At is the expiry time of an artifact stored at now (nil: never).
func (e ExpireIn) At(now time.Time) *time.Time {
	if e.Never {
		return nil
	}
	t := now.Add(e.After)
	return &t
}

// durationUnits are the units GitLab's duration parser (ChronicDuration) reads, in seconds:
// a month is 30 days and a year 365, as there.
var durationUnits = map[string]float64{
	"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
	"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
	"d": 86400, "day": 86400, "days": 86400,
	"w": 7 * 86400, "wk": 7 * 86400, "wks": 7 * 86400, "week": 7 * 86400, "weeks": 7 * 86400,
	"mo": 30 * 86400, "mos": 30 * 86400, "month": 30 * 86400, "months": 30 * 86400,
	"y": 365 * 86400, "yr": 365 * 86400, "yrs": 365 * 86400, "year": 365 * 86400, "years": 365 * 86400,
}

// ParseExpireIn reads GitLab's duration syntax: "never", or amounts with units such as
// "30 days", "1 week and 2 days", "3 hrs 20 min", "1.5h", "2d12h", or "1:30:00"; a bare
// number is seconds.
func ParseExpireIn(s string) (ExpireIn, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	bad := fmt.Errorf("expire_in %q is not a duration such as \"30 days\", \"1 week\", \"3 hrs 20 min\" or \"never\"", clipText(s, 64))
	switch in {
	case "":
		return ExpireIn{}, bad
	case "never":
		return ExpireIn{Never: true}, nil
	}
	if strings.Contains(in, ":") {
		return parseClock(in, bad)
	}
	var total float64
	seen := false
	for i := 0; i < len(in); {
		c := rune(in[i])
		switch {
		case c == ' ' || c == ',' || c == '\t':
			i++
			continue
		case strings.HasPrefix(in[i:], "and") && (i+3 == len(in) || !unicode.IsLetter(rune(in[i+3]))):
			i += 3
			continue
		}
		j := i
		for j < len(in) && (in[j] >= '0' && in[j] <= '9' || in[j] == '.') {
			j++
		}
		if j == i {
			return ExpireIn{}, bad
		}
		n, err := strconv.ParseFloat(in[i:j], 64)
		if err != nil {
			return ExpireIn{}, bad
		}
		for j < len(in) && in[j] == ' ' {
			j++
		}
		k := j
		for k < len(in) && in[k] >= 'a' && in[k] <= 'z' {
			k++
		}
		unit := 1.0 // a bare number counts seconds
		if k > j {
			u, ok := durationUnits[in[j:k]]
			if !ok {
				return ExpireIn{}, bad
			}
			unit = u
		}
		total += n * unit
		seen = true
		i = k
	}
	if !seen {
		return ExpireIn{}, bad
	}
	return expireSeconds(total, bad)
}

// parseClock reads h:mm:ss, mm:ss or d:hh:mm:ss.
func parseClock(in string, bad error) (ExpireIn, error) {
	parts := strings.Split(in, ":")
	if len(parts) > 4 {
		return ExpireIn{}, bad
	}
	mult := []float64{1, 60, 3600, 86400}
	var total float64
	for i := range parts {
		p := parts[len(parts)-1-i]
		n, err := strconv.ParseFloat(p, 64)
		if err != nil || n < 0 || p == "" {
			return ExpireIn{}, bad
		}
		total += n * mult[i]
	}
	return expireSeconds(total, bad)
}

// maxExpireIn keeps expiry times within what a time.Duration holds (292 years).
const maxExpireIn = 200 * 365 * 24 * time.Hour

func expireSeconds(total float64, bad error) (ExpireIn, error) {
	if math.IsNaN(total) || total < 0 {
		return ExpireIn{}, bad
	}
	if total*float64(time.Second) > float64(maxExpireIn) {
		return ExpireIn{}, fmt.Errorf("%w (longer than 200 years: use never)", bad)
	}
	return ExpireIn{After: time.Duration(total * float64(time.Second))}, nil
}

// clipText cuts s for an error message.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
