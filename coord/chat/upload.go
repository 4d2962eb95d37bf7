package chat

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Upload is an attachment of a dispatched message, base64-encoded.
type Upload struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// Skipped is an attachment left out of a message, with why: decode_failed
// (not base64), empty, too_large (over AttachmentMax, or past
// MaxAttachments).
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Reasons an attachment is skipped.
const (
	SkipDecode   = "decode_failed"
	SkipEmpty    = "empty"
	SkipTooLarge = "too_large"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// decoded is an attachment that can be kept: its place in the message
// and its bytes.
type decoded struct {
	index int
	name  string
	data  []byte
}

// decodeUploads decodes ups: the usable ones are returned, the others
// listed with why.
func (e *Engine) decodeUploads(ups []Upload) (kept []decoded, skipped []Skipped) {
	for i, u := range ups {
		reason := ""
		var data []byte
		switch {
		case i >= e.cfg.MaxAttachments || base64.StdEncoding.DecodedLen(len(u.Data)) > e.cfg.AttachmentMax+2:
			reason = SkipTooLarge
		default:
			var err error
			if data, err = base64.StdEncoding.DecodeString(u.Data); err != nil {
				reason = SkipDecode
			}
		}
		switch {
		case reason != "":
		case len(data) == 0:
			reason = SkipEmpty
		case len(data) > e.cfg.AttachmentMax:
			reason = SkipTooLarge
		}
		if reason != "" {
			skipped = append(skipped, Skipped{Name: u.Name, Reason: reason})
			continue
		}
		kept = append(kept, decoded{index: i, name: u.Name, data: data})
	}
	return kept, skipped
}

// saveUploads writes the kept attachments under the conversation's
// uploads folder, named after the item, and returns their names.
func (e *Engine) saveUploads(c *conv, item string, kept []decoded) ([]string, error) {
	var names []string
	for _, u := range kept {
		name := fmt.Sprintf("%s-%d-%s", item, u.index, safeName(u.name))
		if err := e.cfg.Files.Write(filepath.Join(c.dir, uploadsDir, name), u.data, 0o644); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// safeName keeps a file name usable and harmless: no folders, no dots in
// front, at most 100 characters.
func safeName(s string) string {
	s = strings.TrimLeft(unsafeName.ReplaceAllString(filepath.Base(s), "_"), ".")
	if len(s) > 100 {
		s = s[len(s)-100:]
	}
	if s == "" {
		s = "file"
	}
	return s
}
