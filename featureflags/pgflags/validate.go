package pgflags

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Sentinel errors of Store. The operator API maps the Invalid ones to 400, ErrNotFound to 404.
var (
	ErrNotFound          = errors.New("feature flag not found")
	ErrInvalidName       = errors.New("invalid feature flag name: want ^[a-z][a-z0-9_]{0,99}$")
	ErrInvalidActor      = errors.New("invalid actor: want project:<id> or runner:<id>")
	ErrInvalidPercentage = errors.New("invalid percentage: want 0..100")
)

var (
	namePattern  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,99}$`)
	actorPattern = regexp.MustCompile(`^(project|runner):[1-9][0-9]{0,18}$`)
)

func validName(name string) error {
	if !namePattern.MatchString(name) {
		return ErrInvalidName
	}
	return nil
}

// validActor also rejects 19-digit ids beyond int64: no project or runner can have one, and
// such a gate could never match.
func validActor(actor string) error {
	if !actorPattern.MatchString(actor) {
		return ErrInvalidActor
	}
	_, id, _ := strings.Cut(actor, ":")
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return ErrInvalidActor
	}
	return nil
}

func validPercentage(pct int) error {
	if pct < 0 || pct > 100 {
		return ErrInvalidPercentage
	}
	return nil
}
