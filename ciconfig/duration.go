package ciconfig

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// Units of GitLab's durations (the ChronicDuration gem): a month is 30 days, a year
// 365.25 days.
var durationUnits = map[string]float64{
	"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
	"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
	"d": 86400, "day": 86400, "days": 86400,
	"w": 604800, "wk": 604800, "wks": 604800, "week": 604800, "weeks": 604800,
	"mo": 2592000, "mos": 2592000, "month": 2592000, "months": 2592000,
	"y": 31557600, "yr": 31557600, "yrs": 31557600, "year": 31557600, "years": 31557600,
}

var errDuration = errors.New("not a duration")

// ParseDuration is parseDuration for the other readers of GitLab's durations (the JSON
// pipeline form's start_in).
func ParseDuration(s string) (int, error) { return parseDuration(s) }

// parseDuration reads a human duration as GitLab does for timeout, start_in and
// expire_in: "1h 30m", "1h30m", "3 hours", "90 minutes", "2d", "1 week and 2 days",
// "1.5h", "01:30:00" (h:m:s) or "90:00" (m:s); a bare number is seconds. It returns
// whole seconds, rounded as ChronicDuration does.
func parseDuration(s string) (int, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return 0, errDuration
	}
	if strings.Contains(s, ":") {
		return parseClock(s)
	}
	s = strings.ReplaceAll(s, ",", " ")
	total := 0.0
	i := 0
	pending := -1.0 // a number not yet given a unit
	seen := false
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c >= '0' && c <= '9' || c == '.':
			if pending >= 0 { // two numbers in a row: the first was seconds
				total += pending
			}
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
				j++
			}
			n, err := strconv.ParseFloat(s[i:j], 64)
			if err != nil {
				return 0, errDuration
			}
			pending, seen, i = n, true, j
		case c >= 'a' && c <= 'z':
			j := i
			for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
				j++
			}
			word := s[i:j]
			i = j
			if word == "and" {
				continue
			}
			mult, ok := durationUnits[word]
			if !ok || pending < 0 {
				return 0, errDuration
			}
			total += pending * mult
			pending = -1
		default:
			return 0, errDuration
		}
	}
	if !seen {
		return 0, errDuration
	}
	if pending >= 0 {
		total += pending
	}
	if total > math.MaxInt32 {
		return 0, errDuration
	}
	return int(math.Round(total)), nil
}

func parseClock(s string) (int, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return 0, errDuration
	}
	total := 0
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || len(p) > 6 {
			return 0, errDuration
		}
		total = total*60 + n
	}
	return total, nil
}
