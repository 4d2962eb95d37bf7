package pages

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The map of a cluster page: the posts that have a location, drawn as an
// SVG with no tiles (the page loads nothing from outside the node). The
// projection is equirectangular, fitted to the posts' bounding box:
//
//   - longitudes: the shortest arc that holds every post, found as the
//     complement of the widest gap between consecutive longitudes (the
//     gap that wraps from the easternmost to the westernmost counts too),
//     so posts on both sides of the antimeridian are drawn side by side;
//     the arc's longitudes are unwrapped past 180 where needed;
//   - the box is padded by a tenth of its span on each side, at least
//     mapMinPad degrees (a single post is at the center of a 1° box),
//     latitudes kept within ±90 and longitudes within 360°;
//   - x is scaled by the cosine of the box's middle latitude (at least
//     mapMinCos), then the box is fitted in mapWidth × mapHeight, centered;
//     the SVG's viewBox is the box, so the page shows the box alone.
//
// The land is the embedded outline web/static/land.svg (Natural Earth's
// 1:110m land, equirectangular), placed under the markers by one affine
// transform, clipped to the box. Posts whose markers would overlap are
// drawn as one marker with their count; each marker links to the list of
// its posts under the map.

// The map's size (the SVG's viewBox) and fitting.
const (
	mapWidth   = 640
	mapHeight  = 320
	mapPadFrac = 0.1
	mapMinPad  = 0.5 // degrees
	mapMinCos  = 0.25
	mapMaxGrid = 8 // graticule lines each way, at most
)

// gridSteps are the graticule's spacings, in degrees (see gridStep).
var gridSteps = []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 45, 90}

// mapPoint is a post's location.
type mapPoint struct{ Lat, Lon float64 }

// mapFrame is a projection fitted to points: the padded box (west and
// east unwrapped) and how degrees become SVG units.
type mapFrame struct {
	west, east, south, north float64
	unwrapFrom               float64 // longitudes are taken in [unwrapFrom, unwrapFrom+360)
	kx, scale, offX, offY    float64
}

// fitMap fits a projection to points (at least one).
func fitMap(points []mapPoint) mapFrame {
	lons := make([]float64, len(points))
	south, north := 90.0, -90.0
	for i, p := range points {
		lons[i] = p.Lon
		south, north = math.Min(south, p.Lat), math.Max(north, p.Lat)
	}
	slices.Sort(lons)
	from, span := lonArc(lons)
	f := mapFrame{unwrapFrom: from}
	lonPad := math.Max(span*mapPadFrac, mapMinPad)
	latPad := math.Max((north-south)*mapPadFrac, mapMinPad)
	f.west, f.east = from-lonPad, from+span+lonPad
	if f.east-f.west > 360 {
		mid := from + span/2
		f.west, f.east = mid-180, mid+180
	}
	f.south, f.north = math.Max(-90, south-latPad), math.Min(90, north+latPad)
	f.kx = math.Max(math.Cos((f.south+f.north)/2*math.Pi/180), mapMinCos)
	w, h := (f.east-f.west)*f.kx, f.north-f.south
	f.scale = math.Min(mapWidth/w, mapHeight/h)
	f.offX, f.offY = (mapWidth-w*f.scale)/2, (mapHeight-h*f.scale)/2
	return f
}

// lonArc is the shortest arc holding every longitude of sorted lons: its
// western end and its span in degrees.
func lonArc(lons []float64) (from, span float64) {
	n, gap, at := len(lons), -1.0, 0
	for i := range n {
		g := lons[(i+1)%n] - lons[i]
		if i == n-1 {
			g += 360
		}
		if g > gap {
			gap, at = g, i
		}
	}
	return lons[(at+1)%n], 360 - gap
}

// x is the SVG x of longitude lon, unwrapped into the frame.
func (f mapFrame) x(lon float64) float64 {
	u := f.unwrapFrom + math.Mod(math.Mod(lon-f.unwrapFrom, 360)+360, 360)
	return f.xOf(u)
}

// xOf is the SVG x of an unwrapped longitude u.
func (f mapFrame) xOf(u float64) float64 { return f.offX + (u-f.west)*f.kx*f.scale }

func (f mapFrame) y(lat float64) float64 { return f.offY + (f.north-lat)*f.scale }

// mapLine is a graticule line, in SVG units.
type mapLine struct{ X1, Y1, X2, Y2 string }

// mapMarker is a marker: one post, or a group of posts whose markers
// would overlap, drawn once with their count. It links to its place in
// the list under the map (Place), which a tap or the keyboard opens.
type mapMarker struct {
	Place int
	Posts string // the ids of its posts, space-separated, for scripts and tests
	Count int
	X, Y  string
	R     string
	Label string // what it says to a screen reader and on hover
}

// mapPlace is the list of a marker's posts, under the map.
type mapPlace struct {
	ID    int
	Label string
	Posts []placedPost
}

// postMap is the map of a cluster page.
type postMap struct {
	Box     [4]string // the padded box: x, y, width, height
	View    [4]string // the viewBox: the box with room for the markers
	Land    string    // the transform that puts the land outline (web/static/land.svg) in the frame
	Lines   []mapLine
	Markers []mapMarker
	Places  []mapPlace
}

// placedPost is a post with a location, as the map takes it.
type placedPost struct {
	ID, Board, Label, Title string
	At                      mapPoint
}

// Markers: a post's radius and a group's, in SVG units, and how close
// two markers may be before they are drawn as one group.
const (
	markerR      = 9
	groupR       = 13
	groupWithin  = 2 * markerR
	mapViewSlack = groupR + 2
	landPerDeg   = 10 // land.svg's units per degree
)

// drawMap draws posts (nil when none has a location).
func drawMap(posts []placedPost) *postMap {
	if len(posts) == 0 {
		return nil
	}
	points := make([]mapPoint, len(posts))
	for i, p := range posts {
		points[i] = p.At
	}
	f := fitMap(points)
	x0, y0, w, h := f.xOf(f.west), f.y(f.north), (f.east-f.west)*f.kx*f.scale, (f.north-f.south)*f.scale
	m := &postMap{Box: [4]string{num(x0), num(y0), num(w), num(h)},
		View: [4]string{num(x0 - mapViewSlack), num(y0 - mapViewSlack), num(w + 2*mapViewSlack), num(h + 2*mapViewSlack)},
		Land: f.landTransform()}
	m.Lines = f.graticule()
	m.group(f, posts)
	return m
}

// landTransform maps land.svg's units (x = (lon+180)·10, y = (90−lat)·10)
// into the frame: the projection is affine in longitude and latitude.
func (f mapFrame) landTransform() string {
	a, d := f.kx*f.scale/landPerDeg, f.scale/landPerDeg
	e, g := f.offX-(180+f.west)*f.kx*f.scale, f.offY+(f.north-90)*f.scale
	return "matrix(" + num6(a) + " 0 0 " + num6(d) + " " + num(e) + " " + num(g) + ")"
}

// group puts each post, in order, in the first group whose marker is
// within groupWithin of it (else in a group of its own), and draws a
// marker per group at the mean of its posts.
func (m *postMap) group(f mapFrame, posts []placedPost) {
	type group struct {
		sx, sy float64
		posts  []placedPost
	}
	var groups []*group
	for _, p := range posts {
		x, y := f.x(p.At.Lon), f.y(p.At.Lat)
		var into *group
		for _, g := range groups {
			n := float64(len(g.posts))
			if math.Hypot(g.sx/n-x, g.sy/n-y) <= groupWithin {
				into = g
				break
			}
		}
		if into == nil {
			into = &group{}
			groups = append(groups, into)
		}
		into.sx, into.sy, into.posts = into.sx+x, into.sy+y, append(into.posts, p)
	}
	for i, g := range groups {
		n := len(g.posts)
		ids := make([]string, n)
		for j, p := range g.posts {
			ids[j] = p.ID
		}
		label := placeLabel(g.posts)
		mk := mapMarker{Place: i + 1, Posts: strings.Join(ids, " "), Count: n, X: num(g.sx / float64(n)), Y: num(g.sy / float64(n)), R: strconv.Itoa(markerR)}
		if n > 1 {
			mk.R = strconv.Itoa(groupR)
			mk.Label = fmt.Sprintf("%s: %d posts", label, n)
		} else {
			mk.Label = label + ": " + g.posts[0].Title
		}
		m.Markers = append(m.Markers, mk)
		m.Places = append(m.Places, mapPlace{ID: i + 1, Label: label, Posts: g.posts})
	}
}

// placeLabel names a group by its posts' labels: the distinct ones, at
// most three, else "a place".
func placeLabel(posts []placedPost) string {
	var labels []string
	for _, p := range posts {
		if p.Label != "" && !slices.Contains(labels, p.Label) {
			labels = append(labels, p.Label)
		}
	}
	switch {
	case len(labels) == 0:
		return "A place"
	case len(labels) > 3:
		return strings.Join(labels[:3], ", ") + " and more"
	}
	return strings.Join(labels, ", ")
}

// graticule is the meridians and parallels of f's box, each way at the
// finest step of gridSteps that draws at most mapMaxGrid lines.
func (f mapFrame) graticule() []mapLine {
	var lines []mapLine
	step := gridStep(f.east - f.west)
	for i := math.Ceil(f.west / step); i*step <= f.east; i++ {
		x := num(f.xOf(i * step))
		lines = append(lines, mapLine{x, num(f.y(f.north)), x, num(f.y(f.south))})
	}
	step = gridStep(f.north - f.south)
	for i := math.Ceil(f.south / step); i*step <= f.north; i++ {
		y := num(f.y(i * step))
		lines = append(lines, mapLine{num(f.xOf(f.west)), y, num(f.xOf(f.east)), y})
	}
	return lines
}

// gridStep is the finest step of gridSteps that cuts span in at most
// mapMaxGrid parts.
func gridStep(span float64) float64 {
	for _, s := range gridSteps {
		if span/s <= mapMaxGrid {
			return s
		}
	}
	return gridSteps[len(gridSteps)-1]
}

// num is an SVG coordinate: two decimals.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// num6 is a scale factor, with six decimals: a land unit may be a
// thousandth of an SVG unit.
func num6(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }
