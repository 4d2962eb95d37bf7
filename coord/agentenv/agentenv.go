// Package agentenv is the environment of the commands the coordination
// daemon runs, agent turns and crons: of the daemon's own environment only
// the variables an allow list names (by default those a coding agent needs
// to find its tools and credentials), never the daemon's own MESH_* ones,
// then what the project sets. It also says which values are secrets, for
// redaction.
package agentenv

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// DefaultWord, in an allow list, stands for Default.
const DefaultWord = "default"

// Default is the allow list without --agent-env: what a coding agent
// needs to find its tools, its files and its credentials. A name ending
// in * is a prefix.
var Default = []string{
	// The user, the shell, the terminal, the locale.
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "XDG_*",
	// Reaching the providers: proxies and certificates.
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
	// Claude Code.
	"ANTHROPIC_*", "CLAUDE_CODE_*", "CLAUDE_CONFIG_DIR",
	// OpenAI Codex.
	"OPENAI_*", "CODEX_*",
	// Gemini CLI.
	"GEMINI_*", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_VERTEXAI",
	"GOOGLE_APPLICATION_CREDENTIALS",
	// GitHub Copilot CLI.
	"COPILOT_*", "GH_TOKEN", "GITHUB_TOKEN",
	// Cursor CLI.
	"CURSOR_API_KEY",
}

// Own is the prefix of the daemon's own variables, never passed on.
const Own = "MESH_"

// ErrPattern is an allow-list entry that is not a variable name, with or
// without a trailing *.
var ErrPattern = errors.New("agentenv: not a variable name or prefix*")

var nameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`)

// Policy is an allow list, expanded.
type Policy struct {
	names    map[string]bool
	prefixes []string
}

// New reads an allow list: names, prefixes ending in *, and DefaultWord.
func New(allow []string) (Policy, error) {
	p := Policy{names: map[string]bool{}}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case a == DefaultWord:
			for _, d := range Default {
				p.add(d)
			}
		case !nameRe.MatchString(a) || a == "*":
			return Policy{}, fmt.Errorf("%w: %q", ErrPattern, a)
		default:
			p.add(a)
		}
	}
	return p, nil
}

func (p *Policy) add(a string) {
	if prefix, ok := strings.CutSuffix(a, "*"); ok {
		p.prefixes = append(p.prefixes, prefix)
	} else {
		p.names[a] = true
	}
}

// Allows reports whether the variable name passes from the daemon's
// environment: listed, and not the daemon's own.
func (p Policy) Allows(name string) bool {
	if strings.HasPrefix(name, Own) {
		return false
	}
	return p.names[name] || slices.ContainsFunc(p.prefixes, func(pre string) bool { return strings.HasPrefix(name, pre) })
}

// Environ is the environment of a command: the variables of base
// ("NAME=value", as os.Environ gives them) that the policy allows, then
// each of set in turn (a later one wins), sorted by name.
func (p Policy) Environ(base []string, set ...map[string]string) []string {
	env := map[string]string{}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && p.Allows(k) {
			env[k] = v
		}
	}
	for _, s := range set {
		for k, v := range s {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// DefaultEnviron is the environment the Default list lets through from
// the process's own.
func DefaultEnviron() []string {
	p, _ := New([]string{DefaultWord})
	return p.Environ(os.Environ())
}

// minSecret is the shortest value taken for a secret: shorter ones ("1",
// "true") would blank out ordinary text.
const minSecret = 8

// secretName are the fragments (in upper case) that make a variable's
// value a secret.
var secretName = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "CREDENTIAL"}

// SecretName reports whether a variable's name says its value is a
// secret (ANTHROPIC_API_KEY, GH_TOKEN, AWS_SECRET_ACCESS_KEY, ...). A
// path to credentials (GOOGLE_APPLICATION_CREDENTIALS) is not one, but
// redacting it costs nothing.
func SecretName(name string) bool {
	n := strings.ToUpper(name)
	return strings.HasSuffix(n, "_KEY") || slices.ContainsFunc(secretName, func(s string) bool { return strings.Contains(n, s) })
}

// Secrets are the values, at least 8 bytes long, of the variables of
// base and of set whose names say they are secrets: what the debug log
// blanks out wherever it appears.
func Secrets(base []string, set ...map[string]string) []string {
	seen := map[string]bool{}
	take := func(k, v string) {
		if SecretName(k) && len(v) >= minSecret {
			seen[v] = true
		}
	}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			take(k, v)
		}
	}
	for _, s := range set {
		for k, v := range s {
			take(k, v)
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	// Longest first: a secret that holds another is blanked whole.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) || len(out[i]) == len(out[j]) && out[i] < out[j] })
	return out
}
