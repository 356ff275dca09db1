// Package access decides who may do what on a project: GitLab's roles (guest to owner) held
// by project members, one declared table of actions and the least role each needs, the
// scope and admin rules of tokens, and GitLab's protected-ref rule for running pipelines.
// Handlers enforce a decision in one middleware per project route; this package makes it,
// and keeps the members it is made from.
package access

import (
	"fmt"
	"strconv"
)

// Level is GitLab's access level of a member (Gitlab::Access): the higher, the more it may.
type Level int

// GitLab's levels. NoAccess is a user who is not a member.
const (
	NoAccess   Level = 0
	Guest      Level = 10
	Reporter   Level = 20
	Developer  Level = 30
	Maintainer Level = 40
	Owner      Level = 50
)

// Levels are the levels a member may have, lowest first.
var Levels = []Level{Guest, Reporter, Developer, Maintainer, Owner}

// String is the role's name: "developer".
func (l Level) String() string {
	switch l {
	case NoAccess:
		return "no access"
	case Guest:
		return "guest"
	case Reporter:
		return "reporter"
	case Developer:
		return "developer"
	case Maintainer:
		return "maintainer"
	case Owner:
		return "owner"
	}
	return "level " + strconv.Itoa(int(l))
}

// Title is the role's name as GitLab's pages write it: "Developer".
func (l Level) Title() string {
	s := l.String()
	return string(s[0]-'a'+'A') + s[1:]
}

// CheckMemberLevel accepts a level a member may be given (GitLab's 10 to 50).
func CheckMemberLevel(l int) error {
	for _, v := range Levels {
		if Level(l) == v {
			return nil
		}
	}
	return fmt.Errorf("access_level must be 10 (guest), 20 (reporter), 30 (developer), 40 (maintainer) or 50 (owner), got %d", l)
}
