package wall

import (
	"crypto/rand"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Bounds of boards and posts (spec 2.4, 8).
const (
	maxSlugLen   = 48
	maxBoardName = 80
	maxAbout     = 400 // spec 8
	maxTitle     = 200
	// maxPostBody bounds any post's body, in characters: a board's
	// limits.post_max_chars is honoured up to it. defaultPostChars bounds
	// it on a board that sets no limit.
	maxPostBody      = 10_000
	defaultPostChars = 4000
	maxURLLen        = 2048
	maxMIMELen       = 127
	maxBoardBody     = 128 << 10 // a request's body
	maxPageSize      = 200
	defaultPage      = 50
	maxHashtags      = 16 // candidates looked up per message
	postIDRandSize   = 15
)

// MaxBoardOpSize bounds a signed board action taken from another node: a
// post at its largest (maxPostBody characters, each escaped to 6 bytes,
// and a title likewise), sealed and base64.
const MaxBoardOpSize = 96 << 10

// Board kinds (spec 2.4).
var boardKinds = map[string]bool{"buysell": true, "events": true, "generic": true}

// ttls are the posts' times to live (spec 2.4); 0 is forever.
var ttls = map[string]time.Duration{
	"24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour,
	"1y": 365 * 24 * time.Hour, "forever": 0,
}

// Errors of bad board and post input.
var (
	ErrBadSlug  = httpx.E(http.StatusBadRequest, "bad_slug", "a slug is 1 to 48 lower case letters, digits and inner dashes")
	ErrBadKind  = httpx.E(http.StatusBadRequest, "bad_kind", "kind must be buysell, events or generic")
	ErrBadTTL   = httpx.E(http.StatusBadRequest, "bad_ttl", "ttl must be 24h, 7d, 30d, 1y or forever")
	ErrBadFile  = httpx.E(http.StatusBadRequest, "bad_file", "file must be {url, mime}: an http or https URL and a MIME type")
	ErrBadAgent = httpx.E(http.StatusBadRequest, "bad_agent", "query agent=<handle> is required: 1 to 64 bytes of printable text without spaces")
	ErrBadPage  = httpx.E(http.StatusBadRequest, "bad_page", "limit must be 1 to 200 and cursor a next_cursor of an earlier answer")
	ErrLongPost = httpx.E(http.StatusRequestEntityTooLarge, "post_too_long",
		"a post's body is at most 4000 characters on a board without limits.post_max_chars, and at most 10000 on any")
)

// checkField refuses text that is not valid, too long (in characters),
// holds control characters other than newlines (and tabs, with tabs), or
// is empty when required.
func checkField(name, v string, max int, required, tabs bool) error {
	switch {
	case !utf8.ValidString(v) || utf8.RuneCountInString(v) > max:
		return httpx.ErrInvalid.With("%s must be valid text of at most %d characters", name, max)
	case required && strings.TrimSpace(v) == "":
		return httpx.ErrInvalid.With("%s is required", name)
	case strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && !(tabs && r == '\t') }):
		return httpx.ErrInvalid.With("%s must not contain control characters", name)
	}
	return nil
}

func validSlug(s string) bool {
	if s == "" || len(s) > maxSlugLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') })
}

func (b *boardContent) validate() error {
	switch {
	case !validSlug(b.Slug):
		return ErrBadSlug.With("slug %q: %s", b.Slug, ErrBadSlug.Detail)
	case !boardKinds[b.Kind]:
		return ErrBadKind.With("kind must be buysell, events or generic, not %q", b.Kind)
	}
	if err := checkField("name", b.Name, maxBoardName, false, false); err != nil {
		return err
	}
	return checkField("about", b.About, maxAbout, false, false)
}

func (p *postContent) validate() error {
	if err := validHandle(p.Author); err != nil {
		return ErrBadAgent.With("agent: %v", err)
	}
	if err := checkField("title", p.Title, maxTitle, true, false); err != nil {
		return err
	}
	if utf8.RuneCountInString(p.Body) > maxPostBody {
		return ErrLongPost
	}
	if err := checkField("body", p.Body, maxPostBody, false, true); err != nil {
		return err
	}
	if p.File != nil {
		if err := p.File.validate(); err != nil {
			return err
		}
	}
	if p.Props.Entry != nil || p.Props.Limits != nil {
		return ErrBadProps.With("a post's props take only where and lang")
	}
	return nil
}

func (f *FileRef) validate() error {
	u, err := url.Parse(f.URL)
	switch {
	case len(f.URL) > maxURLLen || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return ErrBadFile.With("file.url must be an http or https URL of at most %d bytes", maxURLLen)
	case !validMIME(f.MIME):
		return ErrBadFile.With("file.mime must be a MIME type (type/subtype) of at most %d bytes", maxMIMELen)
	}
	return nil
}

func validMIME(m string) bool {
	typ, sub, ok := strings.Cut(m, "/")
	token := func(s string) bool {
		return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
			return r <= ' ' || r > '~' || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r)
		})
	}
	params := ""
	sub, params, _ = strings.Cut(sub, ";")
	return ok && len(m) <= maxMIMELen && token(typ) && token(strings.TrimSpace(sub)) && !strings.ContainsFunc(params, unicode.IsControl)
}

// newPostID returns a fresh post id: p_ and 24 base32 characters.
func newPostID() string {
	b := make([]byte, postIDRandSize)
	rand.Read(b)
	return "p_" + strings.ToLower(idEncoding.EncodeToString(b))
}

func validPostID(id string) bool {
	rest, ok := strings.CutPrefix(id, "p_")
	return ok && len(rest) == 24 && !strings.ContainsFunc(rest, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '2' && r <= '7') })
}
