package wall

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentmesh/mesh/internal/httpx"
)

// Props are one level's props (cluster, board or post), spec 2.5. A key
// left unset (nil, "") inherits from the level above; see
// EffectiveProps. Stored values never hold null, and a Props value is
// never changed in place once stored: Apply and EffectiveProps make new
// ones that may share the pointed-to values.
type Props struct {
	Where  *Where  `json:"where,omitempty"` // JSON: {"lat","lon","label"} or the string "none"
	Lang   string  `json:"lang,omitempty"`
	Entry  *Entry  `json:"entry,omitempty"`
	Limits *Limits `json:"limits,omitempty"`
}

// Where is a location stamped by a writer (the service never geocodes),
// or None: location-agnostic, which stops the inheritance of where.
// Humans are shown Label, never the coordinates.
type Where struct {
	None     bool
	Lat, Lon float64
	Label    string
}

// Entry is what a board declares of its readers: AgeMin is enforced
// (reads and post creation need adult=1 from 18 on, see AgeGated);
// Require is informative tags.
type Entry struct {
	AgeMin  int      `json:"age_min"`
	Require []string `json:"require,omitempty"`
}

// Limits are enforced on post creation.
type Limits struct {
	PostMaxChars int `json:"post_max_chars"`
}

// PropsLevel is where props are set; a post takes only where and lang.
type PropsLevel int

// The levels, from the top down.
const (
	ClusterProps PropsLevel = iota
	BoardProps
	PostProps
)

// Bounds on props values.
const (
	maxLabelLen     = 200
	maxLangLen      = 35
	maxLangSubtag   = 8
	maxRequireTags  = 16
	maxRequireTag   = 64
	maxAgeMin       = 150
	maxPostMaxChars = 1_000_000
	// maxPropsSize bounds a props value's JSON; the largest valid one,
	// every character a \u escape, is about 16 KB.
	maxPropsSize = 32 << 10
)

// The props keys.
const (
	keyWhere  = "where"
	keyLang   = "lang"
	keyEntry  = "entry"
	keyLimits = "limits"
)

// PropsPatch is a props object from a request: per key absent (keep),
// null (clear, so the level inherits the key again), or a value (set).
// A whole props value of JSON null clears every key (ClearAll).
type PropsPatch struct {
	ClearAll bool
	Set      Props    // the keys given a value
	Clear    []string // the keys given null, sorted
}

// propsKey is how one key is decoded and cleared.
type propsKey struct {
	onPost bool // a post may set it
	decode func(raw json.RawMessage, p *Props) error
	clear  func(p *Props)
}

var propsKeys = map[string]propsKey{
	keyWhere: {true, func(raw json.RawMessage, p *Props) error {
		p.Where = new(Where)
		return json.Unmarshal(raw, p.Where)
	}, func(p *Props) { p.Where = nil }},
	keyLang: {true, func(raw json.RawMessage, p *Props) error {
		if err := json.Unmarshal(raw, &p.Lang); err != nil {
			return ErrBadProps.With("props.lang must be a string")
		}
		return checkLang("props.lang", p.Lang)
	}, func(p *Props) { p.Lang = "" }},
	keyEntry: {false, func(raw json.RawMessage, p *Props) error {
		p.Entry = new(Entry)
		return json.Unmarshal(raw, p.Entry)
	}, func(p *Props) { p.Entry = nil }},
	keyLimits: {false, func(raw json.RawMessage, p *Props) error {
		p.Limits = new(Limits)
		return json.Unmarshal(raw, p.Limits)
	}, func(p *Props) { p.Limits = nil }},
}

// DecodeProps decodes and validates raw, the JSON value of a request's
// "props" key: empty (the key was absent) changes nothing, null clears
// every key, an object sets or (null values) clears its keys. Unknown
// keys, keys a level does not take (a post takes where and lang), wrong
// types and values out of bounds are 400 errors with the code bad_props,
// or bad_coordinates for where's latitude and longitude.
func DecodeProps(raw json.RawMessage, level PropsLevel) (PropsPatch, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return PropsPatch{}, nil
	case len(raw) > maxPropsSize:
		return PropsPatch{}, ErrBadProps.With("props must be at most %d bytes of JSON", maxPropsSize)
	case string(raw) == "null":
		return PropsPatch{ClearAll: true}, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return PropsPatch{}, ErrBadProps.With("props must be a JSON object or null")
	}
	var patch PropsPatch
	for _, k := range slices.Sorted(maps.Keys(obj)) { // the first bad key in a fixed order
		pk, ok := propsKeys[k]
		switch {
		case !ok:
			return PropsPatch{}, ErrBadProps.With("unknown props key %q: props take where, lang, entry and limits", k)
		case level == PostProps && !pk.onPost:
			return PropsPatch{}, ErrBadProps.With("a post's props take only where and lang, not %q", k)
		case string(obj[k]) == "null":
			patch.Clear = append(patch.Clear, k)
		default:
			if err := pk.decode(obj[k], &patch.Set); err != nil {
				return PropsPatch{}, clientError(err, "props."+k)
			}
		}
	}
	return patch, nil
}

// clientError is err as a client sees it: a coded error as it is, any
// other (a JSON type error) as bad_props naming what.
func clientError(err error, what string) error {
	var e *httpx.Error
	if errors.As(err, &e) {
		return e
	}
	return ErrBadProps.With("%s has the wrong shape: %v", what, err)
}

// Apply returns p with patch applied: every key if ClearAll, then the
// keys in Clear removed, then the keys in Set set.
func (p Props) Apply(patch PropsPatch) Props {
	if patch.ClearAll {
		p = Props{}
	}
	for _, k := range patch.Clear {
		if pk, ok := propsKeys[k]; ok {
			pk.clear(&p)
		}
	}
	return p.override(patch.Set)
}

// override returns p with every key q sets taken from q.
func (p Props) override(q Props) Props {
	if q.Where != nil {
		p.Where = q.Where
	}
	if q.Lang != "" {
		p.Lang = q.Lang
	}
	if q.Entry != nil {
		p.Entry = q.Entry
	}
	if q.Limits != nil {
		p.Limits = q.Limits
	}
	return p
}

// EffectiveProps merges levels given from the top (cluster) down (board,
// then post): for each key the lowest level that sets it wins. A where
// of none is such a setting: it stops the inheritance of where, and the
// effective Where is nil unless a lower level sets a location again.
func EffectiveProps(levels ...Props) Props {
	var eff Props
	for _, l := range levels {
		eff = eff.override(l)
	}
	if eff.Where != nil && eff.Where.None {
		eff.Where = nil
	}
	return eff
}

// AgeGated reports whether reads and post creation need adult=1: the
// effective entry.age_min is 18 or more (spec section 7, age_gated).
// Age is a declared self-assertion, not verified.
func (p Props) AgeGated() bool {
	return p.Entry != nil && p.Entry.AgeMin >= 18
}

// whereNone is Where's JSON when None.
const whereNone = "none"

// MarshalJSON writes "none" or {"lat","lon","label"} (label when set).
func (w Where) MarshalJSON() ([]byte, error) {
	if w.None {
		return json.Marshal(whereNone)
	}
	return json.Marshal(struct {
		Lat   float64 `json:"lat"`
		Lon   float64 `json:"lon"`
		Label string  `json:"label,omitempty"`
	}{w.Lat, w.Lon, w.Label})
}

// UnmarshalJSON takes "none" or an object with lat and lon (required)
// and label, validated as DecodeProps does.
func (w *Where) UnmarshalJSON(raw []byte) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != whereNone {
			return ErrBadProps.With(`props.where must be an object {"lat","lon","label"} or "none", not %q`, s)
		}
		*w = Where{None: true}
		return nil
	}
	var lat, lon *float64
	var label string
	if err := strictObject(raw, "props.where", map[string]any{"lat": &lat, "lon": &lon, "label": &label}); err != nil {
		return err
	}
	if lat == nil || lon == nil {
		return ErrBadCoordinates.With("props.where needs both lat and lon")
	}
	if err := checkCoordinates(*lat, *lon); err != nil {
		return err
	}
	if err := checkText("props.where.label", label, maxLabelLen); err != nil {
		return err
	}
	*w = Where{Lat: *lat, Lon: *lon, Label: label}
	return nil
}

// UnmarshalJSON takes {"age_min","require"}, validated.
func (e *Entry) UnmarshalJSON(raw []byte) error {
	var v Entry
	if err := strictObject(raw, "props.entry", map[string]any{"age_min": &v.AgeMin, "require": &v.Require}); err != nil {
		return err
	}
	if v.AgeMin < 0 || v.AgeMin > maxAgeMin {
		return ErrBadProps.With("props.entry.age_min must be 0..%d", maxAgeMin)
	}
	if len(v.Require) > maxRequireTags {
		return ErrBadProps.With("props.entry.require takes at most %d tags", maxRequireTags)
	}
	for _, tag := range v.Require {
		if err := checkText("props.entry.require tag", tag, maxRequireTag); err != nil {
			return err
		}
		if tag == "" {
			return ErrBadProps.With("props.entry.require tags must not be empty")
		}
	}
	if len(v.Require) == 0 {
		v.Require = nil // [] and absent are the same
	}
	*e = v
	return nil
}

// UnmarshalJSON takes {"post_max_chars"}, validated.
func (l *Limits) UnmarshalJSON(raw []byte) error {
	var v Limits
	if err := strictObject(raw, "props.limits", map[string]any{"post_max_chars": &v.PostMaxChars}); err != nil {
		return err
	}
	if v.PostMaxChars < 1 || v.PostMaxChars > maxPostMaxChars {
		return ErrBadProps.With("props.limits.post_max_chars must be 1..%d", maxPostMaxChars)
	}
	*l = v
	return nil
}

// strictObject decodes raw, a JSON object, into fields by exact key (not
// encoding/json's case-insensitive match): an unknown key, a null value
// or a value of the wrong type is a bad_props error naming what.
func strictObject(raw []byte, what string, fields map[string]any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return ErrBadProps.With("%s must be an object", what)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		dst, ok := fields[k]
		if !ok {
			return ErrBadProps.With("%s has an unknown key %q", what, k)
		}
		if string(v) == "null" {
			return ErrBadProps.With("%s.%s must not be null", what, k)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return coordinateError(k, ErrBadProps.With("%s.%s has the wrong type or is out of range", what, k))
		}
	}
	return nil
}

// coordinateError is bad_coordinates for a latitude or longitude, err
// for any other key.
func coordinateError(key string, err error) error {
	if key == "lat" || key == "lon" {
		return ErrBadCoordinates.With("props.where.%s must be a number", key)
	}
	return err
}

// checkCoordinates: a finite latitude in -90..90 and longitude in
// -180..180.
func checkCoordinates(lat, lon float64) error {
	if !(lat >= -90 && lat <= 90) || !(lon >= -180 && lon <= 180) {
		return ErrBadCoordinates.With("latitude %g, longitude %g: want a latitude in -90..90 and a longitude in -180..180", lat, lon)
	}
	return nil
}

// checkText: valid UTF-8 of at most max characters on one line.
func checkText(what, s string, max int) error {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return ErrBadProps.With("%s must be valid text of at most %d characters", what, max)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return ErrBadProps.With("%s must not contain control characters", what)
	}
	return nil
}

// checkLang takes a BCP-47-like language code: up to 35 characters of
// subtags of 1 to 8 ASCII letters and digits joined by '-' ("en",
// "pt-BR", "zh-Hant-TW").
func checkLang(what, s string) error {
	if s == "" || len(s) > maxLangLen {
		return ErrBadProps.With("%s must be a language code of 1 to %d characters", what, maxLangLen)
	}
	for sub := range strings.SplitSeq(s, "-") {
		if sub == "" || len(sub) > maxLangSubtag || strings.ContainsFunc(sub, notAlnum) {
			return ErrBadProps.With("%s %q is not a language code such as en, pt-BR or zh-Hant-TW", what, s)
		}
	}
	return nil
}

func notAlnum(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

// MaxRadiusKm is half the Earth's circumference: a radius that takes in
// every point.
const MaxRadiusKm = 20037.5

// earthRadiusKm is the mean Earth radius (IUGG).
const earthRadiusKm = 6371.0088

// DistanceKm is the great-circle distance on a sphere of radius
// 6371.0088 km. It is the haversine formula with the haversine of the
// angle taken as (c/2)², c the chord between the points' unit vectors,
// which is exact near the poles and across the antimeridian and lets
// GeoIndex compute the very same figure from stored vectors.
func DistanceKm(aLat, aLon, bLat, bLon float64) float64 {
	return chordKm(chord2(unitVector(aLat, aLon), unitVector(bLat, bLon)))
}

// vec3 is a point on the unit sphere.
type vec3 [3]float64

func unitVector(lat, lon float64) vec3 {
	sinLat, cosLat := math.Sincos(lat * math.Pi / 180)
	sinLon, cosLon := math.Sincos(lon * math.Pi / 180)
	return vec3{cosLat * cosLon, cosLat * sinLon, sinLat}
}

// chord2 is the squared chord between a and b.
func chord2(a, b vec3) float64 {
	dx, dy, dz := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return dx*dx + dy*dy + dz*dz
}

// chordKm is the great-circle distance of a squared chord: the angle is
// 2·asin(c/2), as haversine(angle) = (c/2)².
func chordKm(c2 float64) float64 {
	return 2 * earthRadiusKm * asin(min(1, math.Sqrt(c2)/2))
}

// asin is math.Asin, but for the small arguments of near points (up to
// 1/16, about 800 km) it sums the arcsine's Taylor series to x¹³, whose
// remainder (under 1e-18 of x) is below float64 rounding: a GeoIndex
// query returns its points' distances several times faster.
func asin(x float64) float64 {
	if x > 1.0/16 {
		return math.Asin(x)
	}
	y := x * x
	return x + x*y*(1.0/6+y*(3.0/40+y*(5.0/112+y*(35.0/1152+y*(63.0/2816+y*231.0/13312)))))
}

// PostFilter is the query of GET .../posts: near=<lat>,<lon> with
// km=<radius>, lang=<code>, adult=1.
type PostFilter struct {
	Near  *Where // nil: no distance filter
	Km    float64
	Lang  string // "": any
	Adult bool   // the reader declares being an adult (see AgeGated)
}

// ParsePostFilter validates the query: near is two numbers
// "<lat>,<lon>" (bad_coordinates), km a number in (0, MaxRadiusKm]
// (bad_radius); near and km go together, lang is a language code, adult
// "1" or "0", and none may be given twice (bad_filter). Other parameters
// are the caller's.
func ParsePostFilter(q url.Values) (PostFilter, error) {
	for _, k := range []string{"near", "km", "lang", "adult"} {
		if len(q[k]) > 1 {
			return PostFilter{}, ErrBadFilter.With("%s is given more than once", k)
		}
	}
	var f PostFilter
	if q.Has("near") != q.Has("km") {
		return PostFilter{}, ErrBadFilter.With("near=<lat>,<lon> and km=<radius> go together")
	}
	if q.Has("near") {
		var err error
		if f.Near, err = parseNear(q.Get("near")); err != nil {
			return PostFilter{}, err
		}
		if f.Km, err = parseRadius(q.Get("km")); err != nil {
			return PostFilter{}, err
		}
	}
	if q.Has("lang") {
		f.Lang = q.Get("lang")
		if err := checkLang("lang", f.Lang); err != nil {
			return PostFilter{}, ErrBadFilter.With("%s", err)
		}
	}
	if q.Has("adult") {
		switch q.Get("adult") {
		case "1":
			f.Adult = true
		case "0":
		default:
			return PostFilter{}, ErrBadFilter.With("adult must be 1 or 0")
		}
	}
	return f, nil
}

func parseNear(s string) (*Where, error) {
	latS, lonS, ok := strings.Cut(s, ",")
	if !ok || strings.Contains(lonS, ",") {
		return nil, ErrBadCoordinates.With("near must be <lat>,<lon>, for example near=48.8566,2.3522")
	}
	lat, errLat := strconv.ParseFloat(latS, 64)
	lon, errLon := strconv.ParseFloat(lonS, 64)
	if errLat != nil || errLon != nil {
		return nil, ErrBadCoordinates.With("near must be two numbers <lat>,<lon>, for example near=48.8566,2.3522")
	}
	if err := checkCoordinates(lat, lon); err != nil {
		return nil, err
	}
	return &Where{Lat: lat, Lon: lon}, nil
}

func parseRadius(s string) (float64, error) {
	km, err := strconv.ParseFloat(s, 64)
	if err != nil || !(km > 0 && km <= MaxRadiusKm) {
		return 0, ErrBadRadius.With("km must be a number above 0 and at most %g, not %q", MaxRadiusKm, s)
	}
	return km, nil
}

// Match reports whether a post with effective props eff passes the
// filter: within Km of Near by great-circle distance (a post without an
// effective location does not) and of language Lang, ignoring case.
// Adult is not a filter of posts: the caller refuses an age-gated board
// to a reader without it.
func (f PostFilter) Match(eff Props) bool {
	if f.Near != nil && (eff.Where == nil || eff.Where.None ||
		DistanceKm(f.Near.Lat, f.Near.Lon, eff.Where.Lat, eff.Where.Lon) > f.Km) {
		return false
	}
	return f.Lang == "" || strings.EqualFold(f.Lang, eff.Lang)
}
