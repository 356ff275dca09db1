package builds

import "testing"

func TestMaskSecrets(t *testing.T) {
	vars := []Variable{
		{Key: "TOKEN", Value: "s3cr3t-value", Masked: true},
		{Key: "SHORT", Value: "abc", Masked: true}, // too short to mask
		{Key: "PLAIN", Value: "visible-value", Masked: false},
	}
	in := []byte("login s3cr3t-value abc visible-value s3cr3t-value\n")
	got := maskSecrets(in, vars, "")
	want := "login xxxxxxxxxxxx abc visible-value xxxxxxxxxxxx\n"
	if string(got) != want {
		t.Errorf("maskSecrets = %q, want %q", got, want)
	}
	if len(got) != len(in) {
		t.Errorf("masking changed the length: %d → %d; runner offsets would break", len(in), len(got))
	}
	if string(in) != "login s3cr3t-value abc visible-value s3cr3t-value\n" {
		t.Error("maskSecrets wrote into its input")
	}
}

func TestMaskSecretsMasksTheJobToken(t *testing.T) {
	in := []byte("curl -H 'JOB-TOKEN: glcbt-abcdefgh12345678' https://example.test\n")
	got := maskSecrets(in, nil, "glcbt-abcdefgh12345678")
	want := "curl -H 'JOB-TOKEN: xxxxxxxxxxxxxxxxxxxxxx' https://example.test\n"
	if string(got) != want {
		t.Errorf("maskSecrets = %q, want %q", got, want)
	}
}
