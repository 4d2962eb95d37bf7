package wall

import (
	"math"
	"sync"
)

// GeoIndex is an in-memory spatial index of points by id (a board's
// posts), safe for concurrent use. It answers radius queries from a grid
// of cells: latitude bands 0.025° (2.8 km) high, each cut into as many
// columns as keep a cell about as wide as it is high (fewer toward the
// poles, one at a pole), so a query looks at the cells its circle
// touches, not at every point. Queries are exact: each candidate's
// distance is DistanceKm's to the last bit, across the antimeridian and
// over the poles alike.
type GeoIndex struct {
	mu    sync.RWMutex
	cells map[cellKey]*geoCell
	locs  map[string]geoLoc
}

type cellKey struct{ band, col int32 }

// geoCell holds its points' ids and unit vectors side by side.
type geoCell struct {
	ids  []string
	vecs []vec3
}

// geoLoc is where an id's point is: its cell and index there.
type geoLoc struct {
	key cellKey
	i   int
}

const (
	bandsPerDegree = 40
	numBands       = 180 * bandsPerDegree
	// geoSlackDeg widens a query's band and column ranges past rounding
	// (about 0.1 m), so that no point within the radius is missed; the
	// exact check drops what the slack lets in.
	geoSlackDeg = 1e-6
)

// bandCols is each band's number of columns: 360° times the cosine of
// its poleward edge, in cells of 1/bandsPerDegree degrees.
var bandCols = func() []int32 {
	cols := make([]int32, numBands)
	for b := range cols {
		lo, hi := bandLat(b), bandLat(b+1)
		edge := max(math.Abs(lo), math.Abs(hi))
		cols[b] = int32(max(1, math.Floor(360*bandsPerDegree*math.Cos(edge*math.Pi/180))))
	}
	return cols
}()

// bandLat is band b's southern edge.
func bandLat(b int) float64 { return float64(b)/bandsPerDegree - 90 }

func band(lat float64) int {
	return min(numBands-1, max(0, int(math.Floor((lat+90)*bandsPerDegree))))
}

// colRange is the unwrapped columns of band b that longitudes lo..hi
// fall in (lo may be below -180 and hi above 180).
func colRange(b int, lo, hi float64) (c0, c1 int) {
	n := float64(bandCols[b])
	return int(math.Floor((lo + 180) * n / 360)), int(math.Floor((hi + 180) * n / 360))
}

func cellOf(lat, lon float64) cellKey {
	b := band(lat)
	c, _ := colRange(b, lon, lon)
	return cellKey{int32(b), int32(c % int(bandCols[b]))} // lon 180 wraps to column 0, with -180
}

// NewGeoIndex returns an empty index.
func NewGeoIndex() *GeoIndex {
	return &GeoIndex{cells: make(map[cellKey]*geoCell), locs: make(map[string]geoLoc)}
}

// Put sets id's point, replacing any it had. Coordinates outside
// -90..90, -180..180 (or not finite) leave id without a point: nothing
// is near them.
func (g *GeoIndex) Put(id string, lat, lon float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(id)
	if checkCoordinates(lat, lon) != nil {
		return
	}
	key := cellOf(lat, lon)
	c := g.cells[key]
	if c == nil {
		c = new(geoCell)
		g.cells[key] = c
	}
	g.locs[id] = geoLoc{key, len(c.ids)}
	c.ids = append(c.ids, id)
	c.vecs = append(c.vecs, unitVector(lat, lon))
}

// Delete removes id's point, if it has one.
func (g *GeoIndex) Delete(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(id)
}

// remove takes id out of its cell, moving the cell's last point into
// its place.
func (g *GeoIndex) remove(id string) {
	loc, ok := g.locs[id]
	if !ok {
		return
	}
	delete(g.locs, id)
	c := g.cells[loc.key]
	last := len(c.ids) - 1
	if loc.i != last {
		c.ids[loc.i], c.vecs[loc.i] = c.ids[last], c.vecs[last]
		g.locs[c.ids[loc.i]] = geoLoc{loc.key, loc.i}
	}
	c.ids[last] = "" // no reference kept past the slice's length
	c.ids, c.vecs = c.ids[:last], c.vecs[:last]
	if last == 0 {
		delete(g.cells, loc.key)
	}
}

// Len is the number of ids with a point.
func (g *GeoIndex) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.locs)
}

// Near calls fn for each id within km of (lat, lon), with its distance,
// in no particular order, until fn returns false. Invalid coordinates
// or a radius not above 0 find nothing; a radius of MaxRadiusKm or more
// finds every point. fn runs under g's read lock: it must not call Put
// or Delete on g.
func (g *GeoIndex) Near(lat, lon, km float64, fn func(id string, distKm float64) bool) {
	if checkCoordinates(lat, lon) != nil || !(km > 0) {
		return
	}
	q := geoQuery{at: unitVector(lat, lon), km: km}
	angle := min(math.Pi, km/earthRadiusKm)
	chord := 2 * math.Sin(angle/2)
	// The squared chord rejects the far points cheaply; the slack keeps
	// every point DistanceKm puts within km, which decides.
	q.maxChord2 = chord*chord*(1+1e-9) + 1e-18
	g.mu.RLock()
	defer g.mu.RUnlock()
	bands, ok := g.plan(lat, lon, angle)
	if !ok {
		for _, c := range g.cells {
			if !q.scan(c, fn) {
				return
			}
		}
		return
	}
	for _, r := range bands {
		for col := r.c0; col <= r.c1; col++ {
			n := int(bandCols[r.band])
			if c := g.cells[cellKey{int32(r.band), int32((col%n + n) % n)}]; c != nil && !q.scan(c, fn) {
				return
			}
		}
	}
}

// bandRange is the columns c0..c1 (unwrapped) of one band that a query
// looks at.
type bandRange struct{ band, c0, c1 int }

// plan lists the cells a circle of angle (radians) around (lat, lon)
// touches, by band; ok is false when they outnumber the cells that hold
// points, so scanning all of those is cheaper.
func (g *GeoIndex) plan(lat, lon, angle float64) (bands []bandRange, ok bool) {
	c := newGeoCap(lat, angle)
	cells := 0
	for b := band(c.latMin); b <= band(c.latMax); b++ {
		r := bandRange{band: b, c0: 0, c1: int(bandCols[b]) - 1}
		if !c.allLon {
			half := c.bandHalfLon(b)
			r.c0, r.c1 = colRange(b, lon-half, lon+half)
			r.c1 = min(r.c1, r.c0+int(bandCols[b])-1) // every column once
		}
		if cells += r.c1 - r.c0 + 1; cells > len(g.cells) {
			return nil, false
		}
		bands = append(bands, r)
	}
	return bands, true
}

// geoCap is the extent of a query's circle (a spherical cap), in degrees
// widened by geoSlackDeg.
type geoCap struct {
	lat, angle     float64 // the centre's latitude (degrees), the radius (radians)
	latMin, latMax float64
	allLon         bool    // the cap covers a pole: every longitude
	halfLon        float64 // else its widest reach in longitude either side
	tangentLat     float64 // the latitude at which it reaches that widest
}

func newGeoCap(lat, angle float64) geoCap {
	angleDeg := angle*180/math.Pi + geoSlackDeg
	c := geoCap{lat: lat, angle: angle, latMin: lat - angleDeg, latMax: lat + angleDeg}
	c.allLon = c.latMax >= 90 || c.latMin <= -90
	// Off the poles, the widest reach is where a meridian is tangent to
	// the circle: asin(sin angle / cos lat) away, at latitude
	// asin(sin lat / cos angle).
	sinLat, cosLat := math.Sincos(lat * math.Pi / 180)
	if s := math.Sin(angle) / cosLat; !c.allLon && s < 1-1e-9 {
		c.halfLon = math.Asin(s)*180/math.Pi + geoSlackDeg
		c.tangentLat = math.Asin(max(-1, min(1, sinLat/math.Cos(angle)))) * 180 / math.Pi
	} else {
		c.allLon = true
	}
	return c
}

// bandHalfLon is the cap's reach in longitude within band b: its widest
// if the tangent latitude is in the band, else its reach at the band's
// edge nearer to that latitude (the reach grows toward it), from the
// haversine formula solved for the longitude: hav Δλ = (hav angle −
// hav Δφ) / (cos φ cos φe). The numerator is rounded up, so that the
// reach never falls short.
func (c geoCap) bandHalfLon(b int) float64 {
	lo, hi := bandLat(b), bandLat(b+1)
	if c.tangentLat >= lo && c.tangentLat <= hi {
		return c.halfLon
	}
	edge := lo
	if c.tangentLat > hi {
		edge = hi
	}
	hav := func(x float64) float64 { s := math.Sin(x / 2); return s * s }
	cc := math.Cos(c.lat*math.Pi/180) * math.Cos(edge*math.Pi/180)
	x := (hav(c.angle)*(1+1e-9) - hav((edge-c.lat)*math.Pi/180)) / cc
	if !(cc > 0 && x < 1) {
		return c.halfLon
	}
	return min(c.halfLon, 2*math.Asin(math.Sqrt(max(0, x)))*180/math.Pi+geoSlackDeg)
}

// geoQuery is one Near call's point and bounds.
type geoQuery struct {
	at        vec3
	km        float64
	maxChord2 float64
}

// scan calls fn for c's points within the query's radius; false when
// fn stopped.
func (q *geoQuery) scan(c *geoCell, fn func(string, float64) bool) bool {
	for i, v := range c.vecs {
		c2 := chord2(q.at, v)
		if c2 > q.maxChord2 {
			continue
		}
		if d := chordKm(c2); d <= q.km && !fn(c.ids[i], d) {
			return false
		}
	}
	return true
}
