package debuglog

import "testing"

func TestRedactText(t *testing.T) {
	secrets := []string{"hunter2hunter2-long", "hunter2hunter2"}
	for _, tc := range []struct{ in, want string }{
		{"password is hunter2hunter2-long, or hunter2hunter2", "password is [REDACTED], or [REDACTED]"},
		{"ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwx", "ANTHROPIC_API_KEY=[REDACTED]"},
		{"key sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX in the log", "key [REDACTED] in the log"},
		{"GH_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "GH_TOKEN=[REDACTED]"},
		{"aws AKIAABCDEFGHIJKLMNOP here", "aws [REDACTED] here"},
		{"Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer [REDACTED]"},
		{"Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]"},
		{`{"api_key": "0123456789abcdef", "model": "opus"}`, `{"api_key": [REDACTED], "model": "opus"}`},
		{"DB_PASSWORD='s3cr3t-value'", "DB_PASSWORD=[REDACTED]"},
		{"postgres://app:pa55word@db:5432/x", "postgres://app:[REDACTED]@db:5432/x"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk", "jwt [REDACTED]"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----", "[REDACTED]"},
		// Ordinary text stays.
		{"max_tokens: 200, line 503, could not write 429 bytes", "max_tokens: 200, line 503, could not write 429 bytes"},
		{"the token expired; basic usage", "the token expired; basic usage"},
		{"see https://docs.example.com/a:b", "see https://docs.example.com/a:b"},
	} {
		if got := RedactText(tc.in, secrets); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
