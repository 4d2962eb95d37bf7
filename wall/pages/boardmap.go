package pages

import (
	"math"
	"slices"
	"strconv"
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
// web/static/boards.js draws the same map with the same arithmetic when
// board frames change the posts; keep them alike.

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

// mapMarker is a post on the map. Lat and Lon are for the page's script,
// which draws the map again; the page shows only Title (the post's
// label and title).
type mapMarker struct {
	Post, Board, Title string
	X, Y, Lat, Lon     string
}

// postMap is the map of a cluster page.
type postMap struct {
	Box     [4]string // the padded box: x, y, width, height
	Lines   []mapLine
	Markers []mapMarker
}

// placedPost is a post with a location, as the map takes it.
type placedPost struct {
	ID, Board, Label, Title string
	At                      mapPoint
}

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
	m := &postMap{Box: [4]string{num(f.xOf(f.west)), num(f.y(f.north)), num((f.east - f.west) * f.kx * f.scale), num((f.north - f.south) * f.scale)}}
	m.Lines = f.graticule()
	for _, p := range posts {
		title := p.Title
		if p.Label != "" {
			title = p.Label + " — " + p.Title
		}
		m.Markers = append(m.Markers, mapMarker{Post: p.ID, Board: p.Board, Title: title,
			X: num(f.x(p.At.Lon)), Y: num(f.y(p.At.Lat)),
			Lat: strconv.FormatFloat(p.At.Lat, 'g', -1, 64), Lon: strconv.FormatFloat(p.At.Lon, 'g', -1, 64)})
	}
	return m
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
