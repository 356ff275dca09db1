package api

import (
	"encoding/json"
	"time"
)

// PushSettings is how pushes reach a project: the inbound webhooks' secret (never shown,
// only whether one is set) and the polling of its remote.
type PushSettings struct {
	WebhookSecretSet bool `json:"webhook_secret_set"`
	// PollInterval is in seconds; 0: the remote is not polled.
	PollInterval int64      `json:"poll_interval"`
	PolledAt     *time.Time `json:"polled_at"`
	PollError    string     `json:"poll_error"`
	// ReceiveURLs are the addresses to give each forge for its webhook.
	ReceiveURLs map[string]string `json:"receive_urls"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

// PushSettingsChange changes a project's push settings; fields left out stay.
type PushSettingsChange struct {
	// WebhookSecret: at least 16 characters; "" turns webhooks off.
	WebhookSecret *string `json:"webhook_secret,omitempty"`
	// PollInterval in seconds: 0 turns polling off. A number, or a string of one (a form
	// body's value).
	PollInterval *json.Number `json:"poll_interval,omitempty"`
}

// WebhookResult answers a forge's webhook: what jobapi did with it.
type WebhookResult struct {
	Result     string `json:"result"` // created, replayed or ignored
	Event      string `json:"event"`
	DeliveryID string `json:"delivery_id,omitempty"`
	// PipelineID: the pipeline created (created), or by the first delivery (replayed).
	PipelineID int64  `json:"pipeline_id,omitempty"`
	Message    string `json:"message"`
}

// PollResult answers a poll asked for by the API.
type PollResult struct {
	Polled   int `json:"polled"`
	Failed   int `json:"failed"`
	Recorded int `json:"recorded"`
	Started  int `json:"started"`
}
