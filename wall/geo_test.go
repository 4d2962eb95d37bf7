package wall

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

type geoPoint struct{ lat, lon float64 }

// randomPoints are n seeded points: uniform over the sphere, and crowded
// where grids go wrong: at and near both poles, along the antimeridian
// (lon ±180 included) and in one city.
func randomPoints(r *rand.Rand, n int) map[string]geoPoint {
	pts := make(map[string]geoPoint, n)
	for i := range n {
		var p geoPoint
		switch i % 6 {
		case 0, 1:
			p = geoPoint{math.Asin(2*r.Float64()-1) * 180 / math.Pi, r.Float64()*360 - 180}
		case 2:
			p = geoPoint{90 - r.Float64()*0.5, r.Float64()*360 - 180}
		case 3:
			p = geoPoint{-90 + r.Float64()*0.5, r.Float64()*360 - 180}
		case 4:
			p = geoPoint{r.Float64()*180 - 90, 180 - r.Float64()*0.3}
			if r.IntN(2) == 0 {
				p.lon = -p.lon
			}
		case 5:
			p = geoPoint{48.85 + r.NormFloat64()*0.1, 2.35 + r.NormFloat64()*0.15}
		}
		if i%97 == 0 { // exactly on a pole, or on the antimeridian
			p = [...]geoPoint{{90, p.lon}, {-90, p.lon}, {p.lat, 180}, {p.lat, -180}}[i%4]
		}
		pts[fmt.Sprint("p_", i)] = p
	}
	return pts
}

// randomQuery is a seeded query: anywhere with any radius up to
// MaxRadiusKm, or straddling the antimeridian, within a few km of a pole
// or in the city.
func randomQuery(r *rand.Rand, i int) (lat, lon, km float64) {
	anyKm := math.Exp(r.Float64()*math.Log(MaxRadiusKm/0.01)) * 0.01 // 10 m .. MaxRadiusKm, log-uniform
	switch i % 5 {
	case 0:
		return math.Asin(2*r.Float64()-1) * 180 / math.Pi, r.Float64()*360 - 180, anyKm
	case 1:
		lon = 179.5 + r.Float64()*0.5
		if r.IntN(2) == 0 {
			lon = -lon
		}
		return r.Float64()*170 - 85, lon, 1 + r.Float64()*300
	case 2:
		lat = 90 - r.Float64()*0.05 // within 5.6 km of the pole
		if r.IntN(2) == 0 {
			lat = -lat
		}
		return lat, r.Float64()*360 - 180, 0.5 + r.Float64()*60
	case 3:
		return [...]float64{90, -90}[r.IntN(2)], r.Float64()*360 - 180, 0.5 + r.Float64()*100
	default:
		return 48.85 + r.NormFloat64()*0.1, 2.35 + r.NormFloat64()*0.15, r.Float64() * 15
	}
}

// near is what Near finds, by id.
func near(g *GeoIndex, lat, lon, km float64) map[string]float64 {
	got := map[string]float64{}
	g.Near(lat, lon, km, func(id string, d float64) bool {
		got[id] = d
		return true
	})
	return got
}

// scanNear is the brute-force answer: every point DistanceKm puts within km.
func scanNear(pts map[string]geoPoint, lat, lon, km float64) map[string]float64 {
	want := map[string]float64{}
	for id, p := range pts {
		if d := DistanceKm(lat, lon, p.lat, p.lon); d <= km {
			want[id] = d
		}
	}
	return want
}

// checkQueries compares Near with a scan for queries random queries.
func checkQueries(t *testing.T, r *rand.Rand, g *GeoIndex, pts map[string]geoPoint, queries int) {
	t.Helper()
	if g.Len() != len(pts) {
		t.Fatalf("Len %d, want %d", g.Len(), len(pts))
	}
	found := 0
	for i := range queries {
		lat, lon, km := randomQuery(r, i)
		got, want := near(g, lat, lon, km), scanNear(pts, lat, lon, km)
		if len(got) != len(want) {
			t.Fatalf("Near(%v, %v, %v km): %d points, a scan finds %d", lat, lon, km, len(got), len(want))
		}
		for id, d := range want {
			if gd, ok := got[id]; !ok || gd != d {
				t.Fatalf("Near(%v, %v, %v km): %s at %v km: got %v, %v", lat, lon, km, id, d, gd, ok)
			}
		}
		found += len(got)
	}
	if found == 0 {
		t.Fatal("no query found anything: the test proves nothing")
	}
}

// TestGeoIndexMatchesScan: Near finds exactly what a scan of every point
// finds, with the same distances, across the antimeridian, near and at
// the poles and up to the whole Earth.
func TestGeoIndexMatchesScan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(12, 1))
	pts := randomPoints(r, 6000)
	g := NewGeoIndex()
	for id, p := range pts {
		g.Put(id, p.lat, p.lon)
	}
	queries := 1500
	if testing.Short() {
		queries = 300 // each is checked against a scan of every point
	}
	checkQueries(t, r, g, pts, queries)
	// The edges, exactly.
	for _, q := range []struct{ lat, lon, km float64 }{
		{90, 0, 1}, {-90, 180, 50}, {0, 180, 100}, {0, -180, 100}, {89.999, 45, 2}, {-89.99, -135, 3},
		{48.85, 2.35, MaxRadiusKm}, {10, 20, 20015.2}, {0, 0, 10000},
	} {
		if got, want := near(g, q.lat, q.lon, q.km), scanNear(pts, q.lat, q.lon, q.km); len(got) != len(want) {
			t.Errorf("Near(%+v): %d points, a scan finds %d", q, len(got), len(want))
		}
	}
	if got := near(g, 0, 0, MaxRadiusKm); len(got) != len(pts) {
		t.Errorf("MaxRadiusKm finds %d of %d points", len(got), len(pts))
	}
}

// TestGeoIndexChurn: after points are put, moved and deleted at random,
// the index still answers as a scan of what is left.
func TestGeoIndexChurn(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 3))
	all := randomPoints(r, 3000)
	ids := make([]string, 0, len(all))
	for id := range all {
		ids = append(ids, id)
	}
	g, live := NewGeoIndex(), map[string]geoPoint{}
	for range 20000 {
		id := ids[r.IntN(300)] // few ids, so each is put, moved and deleted many times
		if r.IntN(3) == 0 {
			g.Delete(id)
			delete(live, id)
			continue
		}
		p := all[ids[r.IntN(len(ids))]]
		g.Put(id, p.lat, p.lon)
		live[id] = p
	}
	checkQueries(t, r, g, live, 500)
}

func TestGeoIndexPutDelete(t *testing.T) {
	t.Parallel()
	g := NewGeoIndex()
	g.Put("a", 48.8566, 2.3522)
	g.Put("b", 48.8566, 2.3522)
	g.Put("a", 51.5074, -0.1278) // moves a to London
	if got := near(g, 48.8566, 2.3522, 1); len(got) != 1 || got["b"] != 0 {
		t.Fatalf("near Paris: %v", got)
	}
	if got := near(g, 51.5074, -0.1278, 1); len(got) != 1 || got["a"] != 0 {
		t.Fatalf("near London: %v", got)
	}
	if g.Len() != 2 {
		t.Fatalf("Len %d after a replacing Put", g.Len())
	}
	g.Delete("a")
	g.Delete("a")
	g.Delete("never")
	if got := near(g, 51.5074, -0.1278, 1000); len(got) != 1 || g.Len() != 1 {
		t.Fatalf("after Delete: %v, Len %d", got, g.Len())
	}
	g.Put("b", math.NaN(), 0) // no location: b is near nothing
	g.Put("c", 91, 0)
	if got := near(g, 0, 0, MaxRadiusKm); len(got) != 0 || g.Len() != 0 {
		t.Fatalf("invalid coordinates kept: %v, Len %d", got, g.Len())
	}
	g.Put("d", 0, 0)
	for _, q := range []struct{ lat, lon, km float64 }{{0, 0, 0}, {0, 0, -1}, {0, 0, math.NaN()}, {math.NaN(), 0, 1}, {0, 200, 1}} {
		if got := near(g, q.lat, q.lon, q.km); len(got) != 0 {
			t.Errorf("Near(%+v) = %v, want nothing", q, got)
		}
	}
}

// TestGeoIndexStops: fn returning false ends the query, in the cell scan
// and in the whole-index scan alike.
func TestGeoIndexStops(t *testing.T) {
	t.Parallel()
	g := NewGeoIndex()
	for i := range 100 {
		g.Put(fmt.Sprint(i), float64(i%10)*0.001, float64(i/10)*0.001)
	}
	for _, km := range []float64{5, MaxRadiusKm} {
		calls := 0
		g.Near(0, 0, km, func(string, float64) bool { calls++; return calls < 3 })
		if calls != 3 {
			t.Errorf("km %v: %d calls after fn said stop at the third", km, calls)
		}
	}
}

// TestGeoIndexConcurrent: puts, deletes and queries at once (run with -race).
func TestGeoIndexConcurrent(t *testing.T) {
	t.Parallel()
	g := NewGeoIndex()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range 2000 {
				id := fmt.Sprint(w, "/", i%50)
				lat, lon, km := randomQuery(r, i)
				switch i % 3 {
				case 0:
					g.Put(id, lat, lon)
				case 1:
					g.Delete(id)
				default:
					near(g, lat, lon, km)
				}
			}
		})
	}
	wg.Wait()
	if n := g.Len(); n > 200 {
		t.Fatalf("Len %d, at most 200 ids were used", n)
	}
}

// BenchmarkGeoIndexNear: 10 km queries over 100,000 points, crowded in a
// 50 km city or spread over the world.
func BenchmarkGeoIndexNear(b *testing.B) {
	const n = 100_000
	for _, bc := range []struct {
		name  string
		point func(r *rand.Rand) geoPoint
	}{
		// 50 km square around Paris: 0.45° of latitude, 0.45°/cos(48.85°) of longitude.
		{"city", func(r *rand.Rand) geoPoint {
			return geoPoint{48.85 + (r.Float64()-0.5)*0.45, 2.35 + (r.Float64()-0.5)*0.684}
		}},
		{"world", func(r *rand.Rand) geoPoint {
			return geoPoint{math.Asin(2*r.Float64()-1) * 180 / math.Pi, r.Float64()*360 - 180}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			g, pts := NewGeoIndex(), make([]geoPoint, n)
			for i := range pts {
				pts[i] = bc.point(r)
				g.Put(fmt.Sprint(i), pts[i].lat, pts[i].lon)
			}
			found := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				q := pts[i%n]
				g.Near(q.lat, q.lon, 10, func(string, float64) bool { found++; return true })
			}
			b.ReportMetric(float64(found)/float64(b.N), "found/op")
		})
	}
}
