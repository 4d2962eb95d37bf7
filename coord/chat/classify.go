package chat

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// Error classes of a failed turn, as recorded in the timeline and sent in
// events. The first five are transient upstream errors: the turn is tried
// again.
const (
	ClassThinking       = "thinking_block"  // a 400 about thinking blocks
	ClassRateLimited    = "rate_limited"    // 429, or a usage limit
	ClassServer         = "server_error"    // 5xx
	ClassOverloaded     = "overloaded"      // 529, or an overloaded_error
	ClassGatewayTimeout = "gateway_timeout" // 504
	ClassPromptTooLong  = "prompt_too_long"
	ClassRequest        = "request_error" // another 4xx: the request is wrong
	ClassAgent          = "agent_failed"  // a non-zero exit without a recognised report
	ClassTimeout        = "timeout"       // killed at the turn timeout
)

// transient are the classes a turn is tried again for.
var transient = map[string]bool{ClassThinking: true, ClassRateLimited: true, ClassServer: true,
	ClassOverloaded: true, ClassGatewayTimeout: true}

// DeclarePrefix starts the line an agent command (a wrapper script) may
// print on stderr to give the class of its failure in the daemon's words:
// "mesh-coord-error: rate_limited".
const DeclarePrefix = "mesh-coord-error:"

// declarable are the classes such a line may give.
var declarable = map[string]bool{ClassThinking: true, ClassRateLimited: true, ClassServer: true, ClassOverloaded: true,
	ClassGatewayTimeout: true, ClassPromptTooLong: true, ClassRequest: true, ClassAgent: true}

// diagnose reads why an attempt that exited non-zero failed from the ends
// of its stdout and stderr, and returns the class (transient[class] says
// whether it is retried) with the report line of stdout it was read from
// (empty when it came from stderr or from nothing). Only a report the
// agent command makes as such counts: a line of stderr that declares the
// class (DeclarePrefix), else the last error report of a coding agent (see
// the shapes below) on stderr, else on stdout. A number or a word anywhere
// else in the output is not a report: without one the failure is local
// (agent_failed) and not retried.
func diagnose(stdout, stderr string) (class, stdoutLine string) {
	if class = declared(stderr); class != "" {
		return class, ""
	}
	if r, ok := lastReport(stderr); ok {
		return r.class(), ""
	}
	if r, ok := lastReport(stdout); ok {
		return r.class(), r.line
	}
	return ClassAgent, ""
}

// declared is the class the last declaring line of stderr gives, if any.
func declared(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), DeclarePrefix); ok {
			if c := strings.TrimSpace(rest); declarable[c] {
				return c
			}
		}
	}
	return ""
}

// report is an upstream error a coding agent reported: the HTTP status it
// names (0 when none) and its text; fixed is the class of a report whose
// shape alone says it (a usage limit).
type report struct {
	status int
	body   string
	fixed  string
	line   string // the line it was read from
}

var (
	thinkingRe = regexp.MustCompile(`(?i)redacted_thinking|\bthinking\b\W{0,2}blocks?\b`)
	// The shapes of a report line, after its leading UI marks; each
	// starts the line and names the status right after its fixed words.
	statusShapes = []*regexp.Regexp{
		// Claude Code: "API Error: 529 {...}", "API Error (529 ...)",
		// "API Error: Repeated 529 Overloaded errors".
		regexp.MustCompile(`^API Error:? \(?(?:Repeated )?(\d{3})\b`),
		// Codex: "ERROR: unexpected status 503 Service Unavailable: ...",
		// "ERROR: exceeded retry limit, last status: 429 Too Many Requests".
		regexp.MustCompile(`^(?:ERROR: )?(?:unexpected status|exceeded retry limit, last status:) (\d{3})\b`),
		// Gemini CLI: "[API Error: got status: 429 Too Many Requests. ...]".
		regexp.MustCompile(`^\[API Error: got status: (\d{3})\b`),
	}
	// Gemini CLI: "[API Error: {"error":{"code":429,...}}]", the JSON
	// possibly over the lines that follow.
	geminiJSON = regexp.MustCompile(`^\[API Error: [\[{]`)
	jsonCode   = regexp.MustCompile(`"code":\s*(\d{3})\b`)
	// Claude Code's usage limits and rate limit without a status.
	rateShapes = regexp.MustCompile(`^(?:API Error: Rate limit reached\b|Claude (?:AI )?usage limit reached\b|You(?:'ve| have) hit your (?:[a-z]+ )?limit\b|\d+-hour limit reached\b)`)
	// Claude Code's prompt-too-long message.
	promptShape = regexp.MustCompile(`^Prompt is too long\b`)
)

// lastReport finds the last line of text that is an error report, with
// what follows it as its body.
func lastReport(text string) (report, bool) {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimLeft(strings.TrimSpace(lines[i]), "⎿■✕●│ ")
		if r, ok := reportLine(line); ok {
			if i+1 < len(lines) {
				r.body += "\n" + strings.Join(lines[i+1:], "\n")
			}
			if r.status == 0 && r.fixed == "" {
				r.status = statusIn(jsonCode, r.body)
			}
			r.line = line
			return r, true
		}
	}
	return report{}, false
}

// reportLine reads one line as a report, if it is one.
func reportLine(line string) (report, bool) {
	for _, re := range statusShapes {
		if m := re.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			return report{status: n, body: line}, true
		}
	}
	switch {
	case rateShapes.MatchString(line):
		return report{fixed: ClassRateLimited, body: line}, true
	case promptShape.MatchString(line):
		return report{fixed: ClassPromptTooLong, body: line}, true
	case geminiJSON.MatchString(line):
		return report{body: line}, true
	case strings.HasPrefix(line, "{"):
		return jsonReport(line)
	}
	return report{}, false
}

// agentEvent is the part of a JSON line of a coding agent's structured
// output that reports a failure: Claude Code's result (--output-format
// json or stream-json) and Codex's turn.failed (exec --json).
type agentEvent struct {
	Type           string `json:"type"`
	IsError        bool   `json:"is_error"`
	APIErrorStatus *int   `json:"api_error_status"`
	Result         string `json:"result"`
	Error          *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func jsonReport(line string) (report, bool) {
	var ev agentEvent
	if json.Unmarshal([]byte(line), &ev) != nil {
		return report{}, false
	}
	switch {
	case ev.Type == "result" && ev.IsError && ev.APIErrorStatus != nil:
		return report{status: *ev.APIErrorStatus, body: ev.Result}, true
	case ev.Type == "result" && ev.IsError:
		return reportLine(strings.TrimSpace(ev.Result))
	case ev.Type == "turn.failed" && ev.Error != nil:
		return reportLine(strings.TrimSpace(ev.Error.Message))
	}
	return report{}, false
}

func statusIn(re *regexp.Regexp, s string) int {
	if m := re.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

// class is the class of r: from its shape, its text (prompt too long,
// thinking blocks, overloaded_error) and its status.
func (r report) class() string {
	b := strings.ToLower(r.body)
	switch {
	case r.fixed != "":
		return r.fixed
	case strings.Contains(b, "prompt is too long") || strings.Contains(b, "prompt_too_long"):
		return ClassPromptTooLong
	case r.status == 400 && thinkingRe.MatchString(r.body):
		return ClassThinking
	case r.status == 429:
		return ClassRateLimited
	case r.status == 529 || strings.Contains(b, "overloaded_error"):
		return ClassOverloaded
	case r.status == 504:
		return ClassGatewayTimeout
	case r.status >= 500 && r.status <= 599:
		return ClassServer
	case r.status >= 400 && r.status <= 499:
		return ClassRequest
	}
	return ClassAgent
}

// Backoff is the wait before retry n (1, 2, ...): min(2^n, 8) seconds.
func Backoff(n int) int {
	if n >= 3 {
		return 8
	}
	return 1 << n
}
