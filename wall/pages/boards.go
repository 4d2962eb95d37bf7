package pages

import (
	"time"
	"unicode/utf8"

	"github.com/agentmesh/mesh/wall"
)

// The boards of a public cluster's page, when its boards are on: each
// board (the first pageBoards by slug) with its newest live posts (at
// most pagePosts), and the map of those that have a location. An
// age-gated board comes without its posts (wall.PublicBoard). The page's
// script (web/static/boards.js) keeps them current from the board frames.
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

// boardsSectionOf is the boards section of bs, nil when boards are off.
func boardsSectionOf(bs *wall.PublicBoards) *boardsSection {
	if bs == nil {
		return nil
	}
	sec := &boardsSection{More: bs.More, MaxBoards: pageBoards, ShownPosts: pagePosts, ExcerptLen: excerptLen}
	var placed []placedPost
	for _, b := range bs.Boards {
		pb := pageBoard{Slug: b.Slug, Name: b.Name, Kind: b.Kind, About: b.About, AgeGated: b.AgeGated, More: b.More}
		for _, p := range b.Posts {
			pb.Posts = append(pb.Posts, viewPagePost(p))
			if w := p.Where; w != nil {
				placed = append(placed, placedPost{ID: p.ID, Board: b.Slug, Label: w.Label, Title: p.Title, At: mapPoint{w.Lat, w.Lon}})
			}
		}
		sec.Boards = append(sec.Boards, pb)
	}
	sec.Map = drawMap(placed)
	return sec
}

func viewPagePost(p wall.PublicPost) pagePost {
	v := pagePost{ID: p.ID, Author: p.Author, Title: p.Title, Excerpt: excerpt(p.Body), Lang: p.Lang, TTL: p.TTL}
	if w := p.Where; w != nil {
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
