package api

import "time"

// Member is a project member, GitLab's shape (GET /projects/:id/members).
type Member struct {
	ID        int64   `json:"id"`
	Username  string  `json:"username"`
	Name      string  `json:"name"`
	State     string  `json:"state"`
	AvatarURL *string `json:"avatar_url"`
	WebURL    string  `json:"web_url"`
	// AccessLevel is GitLab's: 10 guest, 20 reporter, 30 developer, 40 maintainer, 50 owner.
	AccessLevel int       `json:"access_level"`
	CreatedAt   time.Time `json:"created_at"`
	// ExpiresAt is a date (2026-12-31), null when the membership does not expire.
	ExpiresAt       *string `json:"expires_at"`
	MembershipState string  `json:"membership_state"`
}
