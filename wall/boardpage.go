package wall

import (
	"time"
	"unicode/utf8"
)

// The boards of a public cluster's page, when its boards are on: each
// board (the first pageBoards by slug) with its newest live posts (at
// most pagePosts), and the map of those that have a location. A board
// whose effective entry.age_min is 18 or more is listed without its
// posts: the page never declares its reader an adult. The page's script
// (web/static/boards.js) keeps them current from the board frames.
const (
	pageBoards  = 50
	pagePosts   = 20
	excerptLen  = 280 // characters of a post's body shown
	pageTimeFmt = "2006-01-02 15:04 UTC"
)

// boardsSection is the boards part of a cluster page.
type boardsSection struct {
	Boards []pageBoard
	More   bool // the cluster has more boards than are shown
	Map    *postMap
	// The bounds, for the page's script.
	MaxBoards, ShownPosts, ExcerptLen int
}

// pageBoard is a board as its cluster's page shows it.
type pageBoard struct {
	Slug, Name, Kind, About string
	AgeGated                bool
	Posts                   []pagePost
	More                    bool // the board has more live posts than are shown
}

// pagePost is a post as the page shows it: its where is its effective
// location's label, never its coordinates.
type pagePost struct {
	ID, Author, Title, Excerpt, Where, Lang, TTL string
	ExpiresAt, Expires                           string // RFC 3339 and as shown; empty: never
}

// pageBoardsOf is cl's boards section, or nil when its boards are off.
func (s *Service) pageBoardsOf(cl *Cluster) (*boardsSection, error) {
	if !cl.Boards {
		return nil, nil
	}
	type listed struct {
		row *boardRow
		bc  boardContent
	}
	g := &signer{cl: cl}
	sec := &boardsSection{MaxBoards: pageBoards, ShownPosts: pagePosts, ExcerptLen: excerptLen}
	var boards []listed
	err := s.scanBoards(g, func(row *boardRow, bc boardContent) bool {
		if len(boards) == pageBoards {
			sec.More = true
			return false
		}
		boards = append(boards, listed{row, bc})
		return true
	})
	if err != nil {
		return nil, err
	}
	cp := g.clusterProps()
	var placed []placedPost
	for _, l := range boards {
		b, err := s.pageBoard(g, cp, l.row, l.bc, &placed)
		if err != nil {
			return nil, err
		}
		sec.Boards = append(sec.Boards, b)
	}
	sec.Map = drawMap(placed)
	return sec, nil
}

// pageBoard reads board row's newest posts (cp: the cluster's props),
// adding those with a location to placed.
func (s *Service) pageBoard(g *signer, cp Props, row *boardRow, bc boardContent, placed *[]placedPost) (pageBoard, error) {
	b := pageBoard{Slug: bc.Slug, Name: bc.Name, Kind: bc.Kind, About: bc.About}
	if b.Name == "" {
		b.Name = bc.Slug
	}
	if EffectiveProps(cp, bc.Props).AgeGated() {
		b.AgeGated = true
		return b, nil
	}
	page, err := s.posts(&boardRead{g: g, row: row, bc: bc, limit: pagePosts})
	if err != nil {
		return b, err
	}
	b.More = page.NextCursor != nil
	for _, p := range page.Posts {
		b.Posts = append(b.Posts, viewPagePost(p))
		if w := p.EffectiveProps.Where; w != nil {
			*placed = append(*placed, placedPost{ID: p.ID, Board: bc.Slug, Label: w.Label, Title: p.Title, At: mapPoint{w.Lat, w.Lon}})
		}
	}
	return b, nil
}

func viewPagePost(p postView) pagePost {
	v := pagePost{ID: p.ID, Author: p.Author, Title: p.Title, Excerpt: excerpt(p.Body), Lang: p.EffectiveProps.Lang, TTL: p.TTL}
	if w := p.EffectiveProps.Where; w != nil {
		v.Where = w.Label
	}
	if p.ExpiresAt != nil {
		v.ExpiresAt, v.Expires = p.ExpiresAt.Format(time.RFC3339), p.ExpiresAt.Format(pageTimeFmt)
	}
	return v
}

// excerpt is body's first excerptLen characters, with an ellipsis when
// it is longer.
func excerpt(body string) string {
	if utf8.RuneCountInString(body) <= excerptLen {
		return body
	}
	return string([]rune(body)[:excerptLen]) + "…"
}
