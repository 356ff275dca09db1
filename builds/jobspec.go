package builds

import (
	"encoding/json"
	"fmt"
)

// The parts of a job definition that .gitlab-ci.yml gives and the runner's payload carries
// (the pipeline's .gitlab-ci.yml, compiled). The YAML compiler (package ciconfig) fills them; the store keeps them in the
// build's payload; handlers turn them into gitlab-runner's JobResponse.

// When values of a job (.gitlab-ci.yml `when`).
const (
	WhenOnSuccess = "on_success"
	WhenOnFailure = "on_failure"
	WhenAlways    = "always"
	WhenManual    = "manual"
	WhenDelayed   = "delayed"
	WhenNever     = "never" // only inside rules: the job is left out of the pipeline
)

// Image is `image:` or one entry of `services:` in its object form; the string form is
// {Name}. Stored payloads from before images took the object form hold a plain string, which UnmarshalJSON
// still reads.
type Image struct {
	Name       string     `json:"name"`
	Entrypoint []string   `json:"entrypoint,omitempty"`
	Command    []string   `json:"command,omitempty"`
	Alias      string     `json:"alias,omitempty"`
	PullPolicy []string   `json:"pull_policy,omitempty"`
	Variables  []Variable `json:"variables,omitempty"`
}

// UnmarshalJSON reads the object form and the plain string older payloads hold.
func (im *Image) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*im = Image{Name: name}
		return nil
	}
	type plain Image
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("image must be a name or an object with a name: %w", err)
	}
	*im = Image(p)
	return nil
}

// Need is one entry of `needs:`: a job of the same pipeline that must finish first.
type Need struct {
	Job       string `json:"job"`
	Artifacts bool   `json:"artifacts"` // default true in YAML
	Optional  bool   `json:"optional,omitempty"`
}

// Artifacts is one entry of the runner's `artifacts` array: the archive (ArtifactType
// "archive", format "zip") or a report (junit: type "junit", format "gzip").
type Artifacts struct {
	Name           string   `json:"name,omitempty"`
	Untracked      bool     `json:"untracked,omitempty"`
	Paths          []string `json:"paths,omitempty"`
	Exclude        []string `json:"exclude,omitempty"`
	When           string   `json:"when,omitempty"` // on_success (default), on_failure, always
	ArtifactType   string   `json:"artifact_type"`
	ArtifactFormat string   `json:"artifact_format"`
	ExpireIn       string   `json:"expire_in,omitempty"`
	// ExposeAs: artifacts:expose_as, the label of the archive's link on the pipeline and
	// job pages (archive only).
	ExposeAs string `json:"expose_as,omitempty"`
	// Access: artifacts:access (public: false is developer); "" is all.
	Access string `json:"access,omitempty"`
}

// Cache is one entry of `cache:` (a job may list several).
type Cache struct {
	Key          string   `json:"key"`
	Untracked    bool     `json:"untracked,omitempty"`
	Policy       string   `json:"policy,omitempty"` // pull-push (default), pull, push
	Paths        []string `json:"paths,omitempty"`
	When         string   `json:"when,omitempty"` // on_success (default), on_failure, always
	FallbackKeys []string `json:"fallback_keys,omitempty"`
	// Unprotect: the key gets GitLab's -non_protected suffix even on a protected ref.
	Unprotect bool `json:"unprotect,omitempty"`
}

// IDToken is one entry of `id_tokens:`: the job's CI/CD variable Name holds an
// OpenID Connect ID token (a JWT) for the audiences Aud. Only the definition is stored: the
// token is minted each time the job is handed to a runner, so it is never at rest. Aud is as
// the file writes it; its variables are expanded when the token is minted, as GitLab does.
// AudList: aud was written as a list, so the claim is an array even of one.
type IDToken struct {
	Name    string   `json:"name"`
	Aud     []string `json:"aud"`
	AudList bool     `json:"aud_list,omitempty"`
}
