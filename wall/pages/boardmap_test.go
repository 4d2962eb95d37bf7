package pages

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// markerAt is where drawMap put the marker of post id.
func markerAt(t *testing.T, m *postMap, id string) (x, y float64) {
	t.Helper()
	for _, mk := range m.Markers {
		if slices.Contains(strings.Fields(mk.Posts), id) {
			x, _ = strconv.ParseFloat(mk.X, 64)
			y, _ = strconv.ParseFloat(mk.Y, 64)
			if x < 0 || x > mapWidth || y < 0 || y > mapHeight {
				t.Fatalf("marker %s at (%v, %v): off the map", id, x, y)
			}
			return x, y
		}
	}
	t.Fatalf("no marker for %s", id)
	return 0, 0
}

func placed(id string, lat, lon float64) placedPost {
	return placedPost{ID: id, Board: "b", Title: "t " + id, Label: "l " + id, At: mapPoint{lat, lon}}
}

// TestDrawMapSinglePost: a lone post is at the center of a 1° box (the
// minimum padding), fitted to the map's height, cos(lat) narrower than
// high: at 60° north, the box is 160 wide (cos 60° = 0.5) and 320 high.
func TestDrawMapSinglePost(t *testing.T) {
	m := drawMap([]placedPost{placed("p", 60, 10)})
	if x, y := markerAt(t, m, "p"); math.Abs(x-320) > 0.01 || math.Abs(y-160) > 0.01 {
		t.Fatalf("lone post at (%v, %v), want the center (320, 160)", x, y)
	}
	if m.Box != [4]string{"240.00", "0.00", "160.00", "320.00"} {
		t.Fatalf("box %v, want x 240, y 0, 160 × 320", m.Box)
	}
	if m.Markers[0].Label != "l p: t p" || m.Places[0].Label != "l p" || m.Markers[0].Count != 1 {
		t.Fatalf("marker %+v, place %+v", m.Markers[0], m.Places[0])
	}
	if drawMap(nil) != nil {
		t.Fatal("a map of no post")
	}
}

// TestDrawMapAntimeridian: posts at 179°E and 179°W are 2° apart, side by
// side across the antimeridian (179°W east of 179°E), not 358° apart
// across the whole map; the box is 2° plus padding wide.
func TestDrawMapAntimeridian(t *testing.T) {
	m := drawMap([]placedPost{placed("w", 0, 179), placed("e", 0, -179)})
	wx, wy := markerAt(t, m, "w")
	ex, ey := markerAt(t, m, "e")
	// The box is 3° wide (2° and 0.5° each side) and 1° high at the
	// equator: fitted to 640 wide, 213.33 units a degree.
	scale := 640.0 / 3
	if math.Abs(ex-wx-2*scale) > 0.02 || wy != ey || math.Abs(wx-0.5*scale) > 0.02 {
		t.Fatalf("w at (%v, %v), e at (%v, %v): want e 2° (%v) east of w, at 0.5° from the west edge", wx, wy, ex, ey, 2*scale)
	}
	// A wide spread: the widest gap (140°, from 120°W east to 20°E) is
	// left out, so the arc runs from 20°E east past 150°E to 120°W.
	m = drawMap([]placedPost{placed("a", 10, 150), placed("b", -10, -120), placed("c", 0, 20)})
	ax, _ := markerAt(t, m, "a")
	bx, _ := markerAt(t, m, "b")
	cx, _ := markerAt(t, m, "c")
	if !(cx < ax && ax < bx) {
		t.Fatalf("a %v, b %v, c %v: want 20°E, 150°E, 120°W from west to east", ax, bx, cx)
	}
}

// TestDrawMapGraticule: the lines are inside the box, at most 8 each way
// (and at least one each way for a box of 1° or more), on round degrees.
func TestDrawMapGraticule(t *testing.T) {
	for _, posts := range [][]placedPost{
		{placed("p", 48.85, 2.35)},
		{placed("a", 48.86, 2.34), placed("b", 35.68, 139.65)},
		{placed("a", -89, -180), placed("b", 89, 180), placed("c", 0, 0)},
	} {
		m := drawMap(posts)
		f := fitMap(func() []mapPoint {
			var pts []mapPoint
			for _, p := range posts {
				pts = append(pts, p.At)
			}
			return pts
		}())
		var vertical, horizontal int
		for _, l := range m.Lines {
			if l.X1 == l.X2 {
				vertical++
			} else if l.Y1 == l.Y2 {
				horizontal++
			}
			for _, v := range []string{l.X1, l.Y1, l.X2, l.Y2} {
				if n, _ := strconv.ParseFloat(v, 64); n < -0.01 || n > mapWidth+0.01 {
					t.Fatalf("line %v outside the map", l)
				}
			}
		}
		if vertical < 1 || vertical > mapMaxGrid+1 || horizontal < 1 || horizontal > mapMaxGrid+1 || vertical+horizontal != len(m.Lines) {
			t.Fatalf("%v: %d meridians, %d parallels of %d lines (box %v to %v, %v to %v)",
				posts, vertical, horizontal, len(m.Lines), f.west, f.east, f.south, f.north)
		}
		if f.north > 90 || f.south < -90 || f.east-f.west > 360 {
			t.Fatalf("box %v to %v, %v to %v: beyond the globe", f.west, f.east, f.south, f.north)
		}
	}
}

// TestDrawMapGroups: posts whose markers would overlap are one marker
// with their count, at their mean, linking to one place that lists them;
// posts far apart keep markers of their own. 35 posts in three cities
// are three markers.
func TestDrawMapGroups(t *testing.T) {
	var posts []placedPost
	cities := []struct {
		label    string
		lat, lon float64
		n        int
	}{{"Paris", 48.85, 2.35, 20}, {"Berlin", 52.52, 13.40, 10}, {"Madrid", 40.42, -3.70, 5}}
	for _, c := range cities {
		for i := range c.n {
			p := placed(fmt.Sprintf("%s%d", c.label, i), c.lat+float64(i)*0.001, c.lon)
			p.Label = c.label
			posts = append(posts, p)
		}
	}
	m := drawMap(posts)
	if len(m.Markers) != 3 || len(m.Places) != 3 {
		t.Fatalf("%d markers, %d places, want 3 each", len(m.Markers), len(m.Places))
	}
	for i, c := range cities {
		mk, pl := m.Markers[i], m.Places[i]
		if mk.Count != c.n || len(strings.Fields(mk.Posts)) != c.n || mk.Place != pl.ID || pl.Label != c.label || len(pl.Posts) != c.n {
			t.Fatalf("%s: marker %+v, place %s with %d posts", c.label, mk, pl.Label, len(pl.Posts))
		}
		if mk.Label != fmt.Sprintf("%s: %d posts", c.label, c.n) || mk.R != strconv.Itoa(groupR) {
			t.Fatalf("%s: marker label %q, radius %s", c.label, mk.Label, mk.R)
		}
	}
	px, _ := markerAt(t, m, "Paris0")
	bx, _ := markerAt(t, m, "Berlin0")
	if math.Abs(px-bx) <= groupWithin {
		t.Fatalf("Paris at %v and Berlin at %v: too close to tell apart", px, bx)
	}
}

// TestDrawMapLand: the land outline's transform puts a point of land.svg
// (x = (lon+180)·10, y = (90−lat)·10) where the frame puts that place.
func TestDrawMapLand(t *testing.T) {
	m := drawMap([]placedPost{placed("a", 48.85, 2.35), placed("b", 35.68, 139.65)})
	var a, d, e, f float64
	if _, err := fmt.Sscanf(m.Land, "matrix(%g 0 0 %g %g %g)", &a, &d, &e, &f); err != nil {
		t.Fatalf("transform %q: %v", m.Land, err)
	}
	for _, id := range []string{"a", "b"} {
		x, y := markerAt(t, m, id)
		lat, lon := 48.85, 2.35
		if id == "b" {
			lat, lon = 35.68, 139.65
		}
		lx, ly := a*(lon+180)*landPerDeg+e, d*(90-lat)*landPerDeg+f
		if math.Abs(lx-x) > 0.05 || math.Abs(ly-y) > 0.05 {
			t.Fatalf("%s: the land puts it at (%v, %v), the marker is at (%v, %v)", id, lx, ly, x, y)
		}
	}
}
