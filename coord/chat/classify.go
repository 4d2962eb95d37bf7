package chat

import (
	"regexp"
	"strings"
)

// Error classes of a failed turn, as recorded in the timeline and sent in
// events. The first five are transient upstream errors: the turn is tried
// again.
const (
	ClassThinking       = "thinking_block"  // a 400 about thinking blocks
	ClassRateLimited    = "rate_limited"    // 429
	ClassServer         = "server_error"    // 5xx
	ClassOverloaded     = "overloaded"      // "overloaded" (e.g. 529)
	ClassGatewayTimeout = "gateway_timeout" // 504 or "gateway timeout"
	ClassPromptTooLong  = "prompt_too_long"
	ClassRequest        = "request_error" // another 4xx: the request is wrong
	ClassAgent          = "agent_failed"  // a non-zero exit without a known cause
	ClassTimeout        = "timeout"       // killed at the turn timeout
)

var statusRe = regexp.MustCompile(`\b([45]\d\d)\b`)

// Classify reads the class of a failed attempt from the end of the
// agent's stderr, and whether it is transient. The agent reports the
// upstream error there in its own words; an HTTP status is any 3-digit
// 4xx or 5xx number on its own.
func Classify(stderr string) (class string, transient bool) {
	s := strings.ToLower(stderr)
	status := ""
	if m := statusRe.FindStringSubmatch(s); m != nil {
		status = m[1]
	}
	switch {
	case strings.Contains(s, "prompt is too long") || strings.Contains(s, "prompt too long") || strings.Contains(s, "prompt_too_long"):
		return ClassPromptTooLong, false
	case strings.Contains(s, "overloaded"):
		return ClassOverloaded, true
	case status == "504" || strings.Contains(s, "gateway timeout"):
		return ClassGatewayTimeout, true
	case status == "429" || strings.Contains(s, "rate limit"):
		return ClassRateLimited, true
	case strings.HasPrefix(status, "5"):
		return ClassServer, true
	case status == "400" && strings.Contains(s, "thinking"):
		return ClassThinking, true
	case strings.HasPrefix(status, "4"):
		return ClassRequest, false
	}
	return ClassAgent, false
}

// Backoff is the wait before retry n (1, 2, ...): min(2^n, 8) seconds.
func Backoff(n int) int {
	if n >= 3 {
		return 8
	}
	return 1 << n
}
