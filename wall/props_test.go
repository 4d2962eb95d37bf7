package wall

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/mesh/internal/httpx"
)

// wantCode fails t unless err is a 400 httpx error with code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var e *httpx.Error
	if !errors.As(err, &e) || e.Code != code || e.Status != 400 {
		t.Errorf("%s: error %v (%#v), want 400 %s", what, err, e, code)
	}
}

// decodeAt is Props{}.Apply(DecodeProps(raw)), failing t on an error.
func decodeAt(t *testing.T, raw string, level PropsLevel) Props {
	t.Helper()
	patch, err := DecodeProps(json.RawMessage(raw), level)
	if err != nil {
		t.Fatalf("DecodeProps(%s): %v", raw, err)
	}
	return Props{}.Apply(patch)
}

var (
	paris  = &Where{Lat: 48.8566, Lon: 2.3522, Label: "Paris"}
	london = &Where{Lat: 51.5074, Lon: -0.1278, Label: "London"}
	none   = &Where{None: true}
)

func TestDecodePropsAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw   string
		level PropsLevel
		want  PropsPatch
	}{
		{``, PostProps, PropsPatch{}},
		{`  `, BoardProps, PropsPatch{}},
		{`null`, BoardProps, PropsPatch{ClearAll: true}},
		{` null `, PostProps, PropsPatch{ClearAll: true}},
		{`{}`, ClusterProps, PropsPatch{}},
		{`{"where":{"lat":48.8566,"lon":2.3522,"label":"Paris"}}`, PostProps, PropsPatch{Set: Props{Where: paris}}},
		{`{"where":{"lon":-180,"lat":-90}}`, PostProps, PropsPatch{Set: Props{Where: &Where{Lat: -90, Lon: -180}}}},
		{`{"where":{"lat":90,"lon":180,"label":""}}`, BoardProps, PropsPatch{Set: Props{Where: &Where{Lat: 90, Lon: 180}}}},
		{`{"where":"none","lang":"zh-Hant-TW"}`, PostProps, PropsPatch{Set: Props{Where: none, Lang: "zh-Hant-TW"}}},
		{`{"lang":null,"where":null}`, PostProps, PropsPatch{Clear: []string{"lang", "where"}}},
		{`{"entry":{"age_min":18,"require":["id","18+"]},"limits":{"post_max_chars":500}}`, BoardProps,
			PropsPatch{Set: Props{Entry: &Entry{AgeMin: 18, Require: []string{"id", "18+"}}, Limits: &Limits{PostMaxChars: 500}}}},
		{`{"entry":{"require":[]},"limits":{"post_max_chars":1000000}}`, ClusterProps,
			PropsPatch{Set: Props{Entry: &Entry{}, Limits: &Limits{PostMaxChars: 1000000}}}},
		{`{"entry":{"age_min":150},"limits":null,"lang":"EN"}`, ClusterProps,
			PropsPatch{Set: Props{Entry: &Entry{AgeMin: 150}, Lang: "EN"}, Clear: []string{"limits"}}},
		{`{"where":{"lat":1,"lon":2,"label":"` + strings.Repeat("é", maxLabelLen) + `"}}`, PostProps,
			PropsPatch{Set: Props{Where: &Where{Lat: 1, Lon: 2, Label: strings.Repeat("é", maxLabelLen)}}}},
	} {
		got, err := DecodeProps(json.RawMessage(tc.raw), tc.level)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("DecodeProps(%s, %d) = %+v, %v; want %+v", tc.raw, tc.level, got, err, tc.want)
		}
	}
}

func TestDecodePropsRefuses(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	tags := func(n int) string { return `["` + strings.Repeat(`t","`, n-1) + `t"]` }
	for _, tc := range []struct {
		raw   string
		level PropsLevel
		code  string
	}{
		{`[]`, BoardProps, "bad_props"},
		{`"none"`, BoardProps, "bad_props"},
		{`{"colour":"red"}`, BoardProps, "bad_props"},
		{`{"Where":"none"}`, BoardProps, "bad_props"}, // keys are exact, not case-folded
		{`{"entry":{"age_min":18}}`, PostProps, "bad_props"},
		{`{"limits":{"post_max_chars":10}}`, PostProps, "bad_props"},
		{`{"limits":null}`, PostProps, "bad_props"}, // not even to clear
		{`{"where":"nowhere"}`, PostProps, "bad_props"},
		{`{"where":5}`, PostProps, "bad_props"},
		{`{"where":{"lat":1,"lon":2,"alt":3}}`, PostProps, "bad_props"},
		{`{"where":{"lat":1,"lon":2,"label":null}}`, PostProps, "bad_props"},
		{`{"where":{"lat":1,"lon":2,"label":"a\nb"}}`, PostProps, "bad_props"},
		{`{"where":{"lat":1,"lon":2,"label":"` + long(maxLabelLen+1) + `"}}`, PostProps, "bad_props"},
		{`{"where":{"lat":1}}`, PostProps, "bad_coordinates"},
		{`{"where":{"lon":1}}`, PostProps, "bad_coordinates"},
		{`{"where":{"lat":"1","lon":2}}`, PostProps, "bad_coordinates"},
		{`{"where":{"lat":90.000001,"lon":2}}`, PostProps, "bad_coordinates"},
		{`{"where":{"lat":-91,"lon":2}}`, PostProps, "bad_coordinates"},
		{`{"where":{"lat":0,"lon":180.5}}`, BoardProps, "bad_coordinates"},
		{`{"where":{"lat":0,"lon":-181}}`, BoardProps, "bad_coordinates"},
		{`{"where":{"lat":1e400,"lon":0}}`, BoardProps, "bad_coordinates"}, // +Inf as a float64
		{`{"lang":""}`, PostProps, "bad_props"},
		{`{"lang":5}`, PostProps, "bad_props"},
		{`{"lang":"en_US"}`, PostProps, "bad_props"},
		{`{"lang":"en-"}`, PostProps, "bad_props"},
		{`{"lang":"en--US"}`, PostProps, "bad_props"},
		{`{"lang":"abcdefghi"}`, PostProps, "bad_props"},
		{`{"lang":"` + strings.Repeat("abc-", 9) + `"}`, PostProps, "bad_props"},
		{`{"entry":{"age_min":-1}}`, BoardProps, "bad_props"},
		{`{"entry":{"age_min":151}}`, BoardProps, "bad_props"},
		{`{"entry":{"age_min":18.5}}`, BoardProps, "bad_props"},
		{`{"entry":{"age_min":1e30}}`, BoardProps, "bad_props"},
		{`{"entry":{"AGE_MIN":18}}`, BoardProps, "bad_props"},
		{`{"entry":{"require":"id"}}`, BoardProps, "bad_props"},
		{`{"entry":{"require":[""]}}`, BoardProps, "bad_props"},
		{`{"entry":{"require":[null]}}`, BoardProps, "bad_props"},
		{`{"entry":{"require":["` + long(maxRequireTag+1) + `"]}}`, BoardProps, "bad_props"},
		{`{"entry":{"require":` + tags(maxRequireTags+1) + `}}`, BoardProps, "bad_props"},
		{`{"entry":[]}`, BoardProps, "bad_props"},
		{`{"limits":{}}`, ClusterProps, "bad_props"},
		{`{"limits":{"post_max_chars":0}}`, ClusterProps, "bad_props"},
		{`{"limits":{"post_max_chars":1000001}}`, ClusterProps, "bad_props"},
		{`{"limits":{"post_max_chars":100,"x":1}}`, ClusterProps, "bad_props"},
		{`{"lang":"` + long(maxPropsSize) + `"}`, ClusterProps, "bad_props"},
	} {
		_, err := DecodeProps(json.RawMessage(tc.raw), tc.level)
		wantCode(t, "DecodeProps("+tc.raw[:min(len(tc.raw), 80)]+")", err, tc.code)
	}
	// The largest tags and label pass.
	decodeAt(t, `{"entry":{"require":`+tags(maxRequireTags)+`},"where":{"lat":0,"lon":0,"label":"`+long(maxLabelLen)+`"}}`, BoardProps)
}

// TestPropsApply: a level's stored props under a sequence of patches;
// absent keys are kept, null keys removed, null props clear everything.
func TestPropsApply(t *testing.T) {
	t.Parallel()
	p := decodeAt(t, `{"where":{"lat":48.8566,"lon":2.3522,"label":"Paris"},"lang":"fr","entry":{"age_min":21},"limits":{"post_max_chars":280}}`, BoardProps)
	for _, step := range []struct {
		patch string
		want  Props
	}{
		{`{"lang":"en"}`, Props{Where: paris, Lang: "en", Entry: &Entry{AgeMin: 21}, Limits: &Limits{PostMaxChars: 280}}},
		{`{"entry":null,"where":"none"}`, Props{Where: none, Lang: "en", Limits: &Limits{PostMaxChars: 280}}},
		{``, Props{Where: none, Lang: "en", Limits: &Limits{PostMaxChars: 280}}},
		{`{"where":{"lat":51.5074,"lon":-0.1278,"label":"London"},"limits":null}`, Props{Where: london, Lang: "en"}},
		{`null`, Props{}},
		{`{"lang":"de"}`, Props{Lang: "de"}},
	} {
		patch, err := DecodeProps(json.RawMessage(step.patch), BoardProps)
		if err != nil {
			t.Fatal(step.patch, err)
		}
		if p = p.Apply(patch); !reflect.DeepEqual(p, step.want) {
			t.Fatalf("after %s: %+v, want %+v", step.patch, p, step.want)
		}
	}
}

// TestEffectiveProps: cluster, board and post levels merged; for each
// key the lowest level that sets it wins, none stops where.
func TestEffectiveProps(t *testing.T) {
	t.Parallel()
	adult := &Entry{AgeMin: 18, Require: []string{"id"}}
	teen := &Entry{AgeMin: 13}
	short := &Limits{PostMaxChars: 140}
	for _, tc := range []struct {
		name                 string
		cluster, board, post Props
		want                 Props
		gated                bool
	}{
		{"nothing set", Props{}, Props{}, Props{}, Props{}, false},
		{"all inherited from the cluster", Props{Where: paris, Lang: "fr", Entry: adult, Limits: short}, Props{}, Props{},
			Props{Where: paris, Lang: "fr", Entry: adult, Limits: short}, true},
		{"board overrides", Props{Where: paris, Lang: "fr", Entry: adult}, Props{Where: london, Entry: teen}, Props{},
			Props{Where: london, Lang: "fr", Entry: teen}, false},
		{"post overrides where and lang", Props{Where: paris, Lang: "fr"}, Props{Limits: short, Entry: adult}, Props{Where: london, Lang: "en"},
			Props{Where: london, Lang: "en", Limits: short, Entry: adult}, true},
		{"none on the board stops where", Props{Where: paris, Lang: "fr"}, Props{Where: none}, Props{},
			Props{Lang: "fr"}, false},
		{"none on the cluster stops where", Props{Where: none}, Props{}, Props{Lang: "en"}, Props{Lang: "en"}, false},
		{"a post sets where again below none", Props{Where: paris}, Props{Where: none}, Props{Where: london},
			Props{Where: london}, false},
		{"none on the post", Props{Where: paris}, Props{Where: london}, Props{Where: none}, Props{}, false},
		{"age 17 is not gated", Props{Entry: &Entry{AgeMin: 17}}, Props{}, Props{}, Props{Entry: &Entry{AgeMin: 17}}, false},
	} {
		eff := EffectiveProps(tc.cluster, tc.board, tc.post)
		if !reflect.DeepEqual(eff, tc.want) || eff.AgeGated() != tc.gated {
			t.Errorf("%s: %+v (gated %v), want %+v (gated %v)", tc.name, eff, eff.AgeGated(), tc.want, tc.gated)
		}
	}
	// The board's own effective props, for its gate, are the first two levels.
	if !EffectiveProps(Props{Entry: adult}, Props{}).AgeGated() || EffectiveProps(Props{Entry: adult}, Props{Entry: teen}).AgeGated() {
		t.Error("a board inherits the cluster's age gate and overrides it")
	}
}

// TestPropsJSON: what a client reads back, "none" included.
func TestPropsJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Props
		want string
	}{
		{Props{}, `{}`},
		{Props{Where: none}, `{"where":"none"}`},
		{Props{Where: &Where{Lat: -33.5, Lon: 151}, Lang: "en"}, `{"where":{"lat":-33.5,"lon":151},"lang":"en"}`},
		{Props{Where: paris, Entry: &Entry{AgeMin: 18, Require: []string{"id"}}, Limits: &Limits{PostMaxChars: 500}},
			`{"where":{"lat":48.8566,"lon":2.3522,"label":"Paris"},"entry":{"age_min":18,"require":["id"]},"limits":{"post_max_chars":500}}`},
	} {
		b, err := json.Marshal(tc.p)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.p, b, err, tc.want)
		}
		if back := decodeAt(t, string(b), BoardProps); !reflect.DeepEqual(back, tc.p) {
			t.Errorf("%s decodes to %+v", b, back)
		}
	}
}

// TestDistanceKm against figures worked out apart from the code, on the
// sphere of radius R = 6371.0088 km.
func TestDistanceKm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		aLat, aLon, bLat, bLon float64
		want, tol              float64
	}{
		// Spherical law of cosines, cos c = sin φ1 sin φ2 + cos φ1 cos φ2
		// cos Δλ, worked with a calculator: c = 0.0539250 rad, × R.
		{"Paris-London", 48.8566, 2.3522, 51.5074, -0.1278, 343.557, 0.001},
		// 1° of the equator across the antimeridian: R·π/180.
		{"antimeridian", 0, 179.5, 0, -179.5, 111.195, 0.001},
		{"antimeridian, either way", 0, -179.5, 0, 179.5, 111.195, 0.001},
		// Over the pole: 0.1° down each meridian, 0.2° of arc: R·0.2·π/180.
		{"across the North Pole", 89.9, 0, 89.9, 180, 22.239, 0.001},
		{"across the South Pole", -89.9, 90, -89.9, -90, 22.239, 0.001},
		// Antipodes: half a great circle, R·π.
		{"antipodes on the equator", 0, 0, 0, 180, 20015.114, 0.001},
		{"pole to pole", 90, 0, -90, 0, 20015.114, 0.001},
		// Meridians meet at a pole: any longitude there is the same point.
		{"the pole itself", 90, 0, 90, 123, 0, 1e-9},
		{"same point", 12.5, -45.25, 12.5, -45.25, 0, 0},
		// lon -180 and 180 are one meridian.
		{"-180 is 180", 10, -180, 10, 180, 0, 1e-9},
		// 1 m along a meridian: R·(1e-3/R) with Δφ = 1e-3/R rad.
		{"one metre", 0, 0, 1e-3 / 6371.0088 * 180 / math.Pi, 0, 1e-3, 1e-9},
	} {
		if got := DistanceKm(tc.aLat, tc.aLon, tc.bLat, tc.bLon); math.Abs(got-tc.want) > tc.tol {
			t.Errorf("%s: %.6f km, want %.3f ± %g", tc.name, got, tc.want, tc.tol)
		}
	}
}

func TestParsePostFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query string
		want  PostFilter
	}{
		{"", PostFilter{}},
		{"agent=ann&token=ck_x", PostFilter{}},
		{"near=48.8566,2.3522&km=10", PostFilter{Near: &Where{Lat: 48.8566, Lon: 2.3522}, Km: 10}},
		{"near=-90,-180&km=20037.5&lang=pt-BR&adult=1", PostFilter{Near: &Where{Lat: -90, Lon: -180}, Km: MaxRadiusKm, Lang: "pt-BR", Adult: true}},
		{"near=90,180&km=0.001&adult=0", PostFilter{Near: &Where{Lat: 90, Lon: 180}, Km: 0.001}},
	} {
		q, _ := url.ParseQuery(tc.query)
		got, err := ParsePostFilter(q)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePostFilter(%s) = %+v, %v; want %+v", tc.query, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ query, code string }{
		{"near=91,0&km=1", "bad_coordinates"},
		{"near=-90.5,0&km=1", "bad_coordinates"},
		{"near=0,180.01&km=1", "bad_coordinates"},
		{"near=0,-181&km=1", "bad_coordinates"},
		{"near=NaN,0&km=1", "bad_coordinates"},
		{"near=0,Inf&km=1", "bad_coordinates"},
		{"near=-Inf,0&km=1", "bad_coordinates"},
		{"near=1,2,3&km=1", "bad_coordinates"},
		{"near=1&km=1", "bad_coordinates"},
		{"near=1,&km=1", "bad_coordinates"},
		{"near=,2&km=1", "bad_coordinates"},
		{"near=&km=1", "bad_coordinates"},
		{"near=a,b&km=1", "bad_coordinates"},
		{"near=1e999,0&km=1", "bad_coordinates"},
		{"near=1,2&km=0", "bad_radius"},
		{"near=1,2&km=-5", "bad_radius"},
		{"near=1,2&km=20037.51", "bad_radius"},
		{"near=1,2&km=1e300", "bad_radius"},
		{"near=1,2&km=NaN", "bad_radius"},
		{"near=1,2&km=Inf", "bad_radius"},
		{"near=1,2&km=", "bad_radius"},
		{"near=1,2&km=ten", "bad_radius"},
		{"near=1,2", "bad_filter"},
		{"km=10", "bad_filter"},
		{"near=1,2&near=3,4&km=1", "bad_filter"},
		{"near=1,2&km=1&km=2", "bad_filter"},
		{"lang=en_US", "bad_filter"},
		{"lang=", "bad_filter"},
		{"lang=en&lang=fr", "bad_filter"},
		{"adult=yes", "bad_filter"},
		{"adult=", "bad_filter"},
		{"adult=1&adult=1", "bad_filter"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParsePostFilter(q)
		wantCode(t, "ParsePostFilter("+tc.query+")", err, tc.code)
	}
}

func TestPostFilterMatch(t *testing.T) {
	t.Parallel()
	near := func(lat, lon, km float64) PostFilter { return PostFilter{Near: &Where{Lat: lat, Lon: lon}, Km: km} }
	for _, tc := range []struct {
		name string
		f    PostFilter
		eff  Props
		want bool
	}{
		{"no filter takes all", PostFilter{}, Props{}, true},
		{"London within 344 km of Paris", near(48.8566, 2.3522, 344), Props{Where: london}, true},
		{"London beyond 343 km of Paris", near(48.8566, 2.3522, 343), Props{Where: london}, false},
		{"across the antimeridian", near(0, 179.5, 111.2), Props{Where: &Where{Lat: 0, Lon: -179.5}}, true},
		{"no location is never near", near(0, 0, MaxRadiusKm), Props{Lang: "en"}, false},
		{"none is never near", near(0, 0, MaxRadiusKm), Props{Where: none}, false},
		{"the whole Earth", near(0, 0, MaxRadiusKm), Props{Where: &Where{Lat: 0, Lon: 180}}, true},
		{"lang ignores case", PostFilter{Lang: "pt-br"}, Props{Lang: "pt-BR"}, true},
		{"lang differs", PostFilter{Lang: "pt"}, Props{Lang: "pt-BR"}, false},
		{"lang unset on the post", PostFilter{Lang: "en"}, Props{}, false},
		{"both", PostFilter{Near: &Where{Lat: 51.5, Lon: 0}, Km: 20, Lang: "en"}, Props{Where: london, Lang: "EN"}, true},
	} {
		if got := tc.f.Match(tc.eff); got != tc.want {
			t.Errorf("%s: Match = %v", tc.name, got)
		}
	}
}

func FuzzDecodeProps(f *testing.F) {
	for _, s := range []string{``, `null`, `{}`, `[]`, `{"where":"none"}`, `{"where":{"lat":-0,"lon":180,"label":"x"}}`,
		`{"lang":"en-GB","where":null}`, `{"entry":{"age_min":18,"require":["a","b"]},"limits":{"post_max_chars":9}}`,
		`{"entry":{"require":[]}}`, `{"where":{"lat":1e-320,"lon":-1e-320}}`, `{"where":{"lat":1,"lon":2,"label":"\u00e9\ud83d\ude00"}}`} {
		for level := range 3 {
			f.Add(s, level)
		}
	}
	f.Fuzz(func(t *testing.T, raw string, level int) {
		lvl := PropsLevel(level & 3 % 3)
		patch, err := DecodeProps(json.RawMessage(raw), lvl)
		if err != nil {
			var e *httpx.Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("DecodeProps(%q): %v is not a 400", raw, err)
			}
			return
		}
		p := Props{}.Apply(patch)
		if lvl == PostProps && (p.Entry != nil || p.Limits != nil) {
			t.Fatalf("a post took %+v", p)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if back := decodeAt(t, string(b), lvl); !reflect.DeepEqual(back, p) {
			t.Fatalf("%q: %+v marshals to %s, which decodes to %+v", raw, p, b, back)
		}
	})
}

// postFilterQuery is the query that asks for f.
func postFilterQuery(f PostFilter) url.Values {
	q := url.Values{}
	if f.Near != nil {
		q.Set("near", strconv.FormatFloat(f.Near.Lat, 'g', -1, 64)+","+strconv.FormatFloat(f.Near.Lon, 'g', -1, 64))
		q.Set("km", strconv.FormatFloat(f.Km, 'g', -1, 64))
	}
	if f.Lang != "" {
		q.Set("lang", f.Lang)
	}
	if f.Adult {
		q.Set("adult", "1")
	}
	return q
}

func FuzzParsePostFilter(f *testing.F) {
	for _, s := range []string{"", "near=1,2&km=3", "near=-90,180&km=20037.5&lang=en&adult=1", "near=0x1p-2,1_0&km=1",
		"near=+1,-2&km=.5", "km=1", "adult=0", "near=1,2,3&km=1", "near=NaN,0&km=1", "lang=zh-Hant-TW"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		pf, err := ParsePostFilter(q)
		if err != nil {
			var e *httpx.Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("ParsePostFilter(%q): %v is not a 400", query, err)
			}
			return
		}
		if pf.Near != nil && (checkCoordinates(pf.Near.Lat, pf.Near.Lon) != nil || !(pf.Km > 0 && pf.Km <= MaxRadiusKm)) {
			t.Fatalf("%q took %+v", query, pf)
		}
		back, err := ParsePostFilter(postFilterQuery(pf))
		if err != nil || !reflect.DeepEqual(back, pf) {
			t.Fatalf("%q: %+v round-trips to %+v, %v", query, pf, back, err)
		}
	})
}

// TestAsinSeries: the series that DistanceKm uses for near points agrees
// with math.Asin to rounding: within 2 units in the last place, as
// math.Asin itself is off by one at times (asin(0.00047001015064434783)
// is 0.000470010167949304050..., the series gives ...408, math.Asin ...397).
func TestAsinSeries(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	xs := []float64{0, 1e-300, 1.0 / 16, math.Nextafter(1.0/16, 0), math.Nextafter(1.0/16, 1)}
	for i := range 100000 {
		xs = append(xs, math.Ldexp(r.Float64()/16, -r.IntN(40)*(i%2))) // small ones too
	}
	for _, x := range xs {
		if got, want := asin(x), math.Asin(x); math.Abs(got-want) > 2*(math.Nextafter(want, 1)-want) {
			t.Fatalf("asin(%g) = %.17g, math.Asin %.17g", x, got, want)
		}
	}
}
