package api

import "time"

// UserDetail is GitLab's user as administrators (and the user itself) see it: User with the
// email and timestamps.
type UserDetail struct {
	User
	Email     string     `json:"email"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// PersonalAccessToken is GitLab's personal access token. Token is set only in the answer to
// its creation or rotation: the secret is never shown again. ExpiresAt is a date
// (YYYY-MM-DD) or null.
type PersonalAccessToken struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Revoked    bool       `json:"revoked"`
	CreatedAt  time.Time  `json:"created_at"`
	Scopes     []string   `json:"scopes"`
	UserID     int64      `json:"user_id"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Active     bool       `json:"active"`
	ExpiresAt  *string    `json:"expires_at"`
	Token      string     `json:"token,omitempty"`
}

// ScopeError is GitLab's answer to a token used beyond its scopes (a 403): Scope lists the
// scopes that would do, space-separated. Message repeats the description for clients that
// read only GitLab's usual {"message": ...}.
type ScopeError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
	Scope            string `json:"scope"`
	Message          string `json:"message"`
}
