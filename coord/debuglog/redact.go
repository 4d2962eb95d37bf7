package debuglog

import (
	"regexp"
	"strings"
)

// tokenShapes are strings that are credentials whatever surrounds them:
// API keys and tokens of the providers the coding agents use, cloud keys,
// JSON web tokens and private keys.
var tokenShapes = regexp.MustCompile(strings.Join([]string{
	`\bsk-[A-Za-z0-9_\-]{20,}`,                                        // OpenAI, Anthropic (sk-ant-...)
	`\bgh[pousr]_[A-Za-z0-9]{30,}`,                                    // GitHub tokens
	`\bgithub_pat_[A-Za-z0-9_]{30,}`,                                  // GitHub fine-grained tokens
	`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`,                                   // AWS access key ids
	`\bAIza[0-9A-Za-z_\-]{35}`,                                        // Google API keys
	`\bxox[abposr]-[A-Za-z0-9\-]{10,}`,                                // Slack tokens
	`\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`, // JSON web tokens
	`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`,
}, "|"))

// bearer is an Authorization header's credential.
var bearer = regexp.MustCompile(`(?i)\b(bearer|authorization:\s*basic)(\s+)[A-Za-z0-9._~+/=\-]{8,}`)

// assignment is a secret-like name given a value, as in an environment
// dump, a config file or JSON: API_KEY=..., "password": "...". Values
// shorter than 8 are kept ("max_tokens: 200").
var assignment = regexp.MustCompile(`(?i)\b([A-Za-z0-9_\-]*(?:token|secret|password|passwd|api_?key|access_?key|private_?key|authorization)[A-Za-z0-9_\-]*["']?\s*[=:]\s*)("[^"\n]{8,}"|'[^'\n]{8,}'|[^\s"',;&]{8,})`)

// urlCredentials is the password of a URL (scheme://user:password@host).
var urlCredentials = regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]+@`)

// RedactText blanks out of s: each of secrets (known values, longest
// first), token-shaped strings, the credential of an Authorization
// header, the value of a secret-like name and a URL's password.
func RedactText(s string, secrets []string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	s = tokenShapes.ReplaceAllString(s, Redacted)
	s = bearer.ReplaceAllString(s, "${1}${2}"+Redacted)
	s = assignment.ReplaceAllStringFunc(s, func(m string) string {
		sub := assignment.FindStringSubmatch(m)
		if sub[2] == Redacted || strings.Trim(sub[2], `"'`) == Redacted {
			return m
		}
		return sub[1] + Redacted
	})
	return urlCredentials.ReplaceAllString(s, "${1}"+Redacted+"@")
}
