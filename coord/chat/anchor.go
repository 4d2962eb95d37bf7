package chat

import (
	"regexp"
	"strings"
)

// Anchor binds a conversation to an initiative, or to one of its tasks.
type Anchor struct {
	Initiative string `json:"initiative"`
	Task       string `json:"task,omitempty"`
}

// anchorRe is a whole output line "[anchor: <target>]", any case, spaces
// tolerated around each part.
var anchorRe = regexp.MustCompile(`(?i)^\s*\[\s*anchor\s*:\s*([^\]]*?)\s*\]\s*$`)

// anchorLine reads an anchor line. ok is false for any other line; clear
// is "[anchor: none]"; a target is "<initiative>" or
// "<initiative>/<task>", each a slug (see Slug).
func anchorLine(line string) (a Anchor, clear, ok bool) {
	m := anchorRe.FindStringSubmatch(line)
	if m == nil {
		return Anchor{}, false, false
	}
	target := strings.TrimSpace(m[1])
	if strings.EqualFold(target, "none") {
		return Anchor{}, true, true
	}
	init, task, _ := strings.Cut(target, "/")
	return Anchor{Initiative: Slug(init), Task: Slug(task)}, false, true
}

// Slug reads an initiative or task id as the roadmap names it: its file's
// lowercase stem; a leading # and surrounding spaces are tolerated.
func Slug(s string) string {
	return strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "#")))
}
