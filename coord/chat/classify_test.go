package chat

import (
	"strings"
	"testing"
)

// TestClassify: each class from the shapes the coding agents print, and
// the near misses that are local failures: a number or a word anywhere in
// the output is not a report.
func TestClassify(t *testing.T) {
	const (
		claude529 = `API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CZbiHognn1znP8MCgREwD"}`
		claude400 = "API Error: 400 {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"messages.11.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`.\"}}"
	)
	for _, tc := range []struct {
		name, stdout, stderr string
		class                string
	}{
		// Claude Code prints its API errors on stdout, in text mode or as a
		// JSON result.
		{"claude overloaded", "partial answer\n" + claude529 + "\n", "", ClassOverloaded},
		{"claude overloaded prose", "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment.\n", "", ClassOverloaded},
		{"claude repeated 529", "API Error: Repeated 529 Overloaded errors\n", "", ClassOverloaded},
		{"claude 500 overloaded_error", `API Error: 500 {"type":"error","error":{"type":"overloaded_error"}}`, "", ClassOverloaded},
		{"claude rate limit", `API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit."}}`, "", ClassRateLimited},
		{"claude rate limit reached", "  ⎿  API Error: Rate limit reached\n", "", ClassRateLimited},
		{"claude usage limit", "Claude AI usage limit reached|1753441200\n", "", ClassRateLimited},
		{"claude hit limit", "You've hit your limit · resets 1pm (Europe/Lisbon)\n", "", ClassRateLimited},
		{"claude 5-hour", "5-hour limit reached ∙ resets 5am\n", "", ClassRateLimited},
		{"claude thinking", claude400, "", ClassThinking},
		{"claude server", "API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n", "", ClassServer},
		{"claude gateway", "API Error: 504 Gateway Timeout\n", "", ClassGatewayTimeout},
		{"claude prompt", "Prompt is too long\n", "", ClassPromptTooLong},
		{"claude prompt 400", `API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, "", ClassPromptTooLong},
		{"claude request", `API Error: 400 {"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"}}`, "", ClassRequest},
		{"claude auth", `API Error: 401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, "", ClassRequest},
		{"claude json result", `{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"result":"API Error: 529 Overloaded"}`, "", ClassOverloaded},
		{"claude json usage", `{"type":"result","is_error":true,"terminal_reason":"api_error","api_error_status":429,"result":"You've hit your session limit"}`, "", ClassRateLimited},
		{"claude json thinking", `{"type":"result","is_error":true,"api_error_status":400,"result":"API Error: 400 thinking blocks must be kept"}`, "", ClassThinking},
		// Codex prints them on stderr, or as turn.failed with --json.
		{"codex rate", "", "ERROR: exceeded retry limit, last status: 429 Too Many Requests, request id: c4fc59ca\n", ClassRateLimited},
		{"codex 503", "", "ERROR: unexpected status 503 Service Unavailable: Service Unavailable, url: https://chatgpt.com/backend-api/codex/responses\n", ClassServer},
		{"codex 504", "", "ERROR: exceeded retry limit, last status: 504 Gateway Timeout\nERROR: exceeded retry limit, last status: 504 Gateway Timeout\n", ClassGatewayTimeout},
		{"codex 401", "", "ERROR: unexpected status 401 Unauthorized: Authentication Error\n", ClassRequest},
		{"codex json", `{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 500 Internal Server Error"}}`, "", ClassServer},
		// Gemini CLI.
		{"gemini status", "", "[API Error: got status: 429 Too Many Requests. {\"error\":{\"code\":429}}]\n", ClassRateLimited},
		{"gemini json", "[API Error: [{\n  \"error\": {\n    \"code\": 503,\n    \"status\": \"UNAVAILABLE\"\n  }\n}]]\n", "", ClassServer},
		// A wrapper declares the class.
		{"declared", "", "mesh-coord-error: overloaded\n", ClassOverloaded},
		{"declared local", "API Error: 529 Overloaded\n", "mesh-coord-error: agent_failed\n", ClassAgent},
		{"stderr first", "API Error: 529 Overloaded\n", "ERROR: unexpected status 400 Bad Request: nope\n", ClassRequest},
		// Near misses: local failures, run once.
		{"traceback line 503", "", "Traceback (most recent call last):\n  File \"/src/build.py\", line 503, in main\n    write(out)\nOSError: could not write 429 bytes\n", ClassAgent},
		{"could not write 429 bytes", "", "error: could not write 429 bytes\n", ClassAgent},
		{"overloaded.md", "", "cp: cannot stat 'docs/overloaded.md': No such file or directory\n", ClassAgent},
		{"thinking in prose", "I was thinking about the 400 failing tests and the gateway timeout handling.\n", "", ClassAgent},
		{"logging ERROR", "", "ERROR:root:could not write 429 bytes\n", ClassAgent},
		{"report mid-line", "the log says API Error: 529 Overloaded\n", "", ClassAgent},
		{"http in a test", "", "FAIL: expected 200, got 503 Service Unavailable\n", ClassAgent},
		{"unknown declared", "", "mesh-coord-error: whatever\n", ClassAgent},
		{"json without status", `{"type":"result","is_error":true,"api_error_status":null,"result":"API Error: Connection error."}`, "", ClassAgent},
		{"json success", `{"type":"result","is_error":false,"api_error_status":null,"result":"overloaded 529"}`, "", ClassAgent},
		{"nothing", "", "", ClassAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if class, _ := diagnose(tc.stdout, tc.stderr); class != tc.class {
				t.Errorf("%s, want %s", class, tc.class)
			}
		})
	}
	for c, want := range map[string]bool{ClassThinking: true, ClassRateLimited: true, ClassServer: true, ClassOverloaded: true,
		ClassGatewayTimeout: true, ClassPromptTooLong: false, ClassRequest: false, ClassAgent: false, ClassTimeout: false} {
		if transient[c] != want {
			t.Errorf("%s transient %v", c, transient[c])
		}
	}
}

func FuzzClassify(f *testing.F) {
	f.Add("API Error: 529 Overloaded", "")
	f.Add("", "ERROR: unexpected status 503 x")
	f.Add(`{"type":"result","is_error":true,"api_error_status":429}`, "mesh-coord-error: overloaded")
	f.Fuzz(func(t *testing.T, stdout, stderr string) {
		class, line := diagnose(stdout, stderr)
		if class == "" || line != "" && !strings.Contains(stdout, line) {
			t.Fatalf("%q %q: %q %q", stdout, stderr, class, line)
		}
	})
}
