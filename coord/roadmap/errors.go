package roadmap

import "errors"

var (
	// ErrFrontmatter is a file whose frontmatter is not a YAML mapping
	// between --- lines, or an edit that would not read back.
	ErrFrontmatter = errors.New("malformed frontmatter")
	// ErrNotFound is an initiative id the roadmap does not have.
	ErrNotFound = errors.New("no such initiative")
	// ErrWall is a wall name other than active, next, backlog, archived.
	ErrWall = errors.New("unknown wall")
)
