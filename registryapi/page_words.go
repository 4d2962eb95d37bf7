package registryapi

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
	"github.com/agentmesh/mesh/internal/site"
)

// What the pages say of an agent, in words: its status, prices,
// reputation and liveness, and how to call it.

// agentStatus is an agent's one badge: heartbeat and reachability
// together, in words a visitor reads right, and its class.
type agentStatus struct{ Text, Class string }

// statusOf words the status of an agent: catalogOnly (a listing alone),
// online (a heartbeat within the window), beat (its latest, nil before
// the first) and what the probes of its endpoint found.
func statusOf(catalogOnly, online bool, beat *time.Time, l LivenessView) agentStatus {
	switch {
	case catalogOnly:
		return agentStatus{"listed only", "catalog"}
	case !online && beat == nil:
		return agentStatus{"registered, no heartbeat yet", "registered"}
	case !online:
		return agentStatus{"offline since " + beat.UTC().Format(site.TimeFormat), "offline"}
	case l.State == LiveReachable:
		return agentStatus{"online, answering", "answering"}
	case l.State == LiveUnreachable && l.FailingSince != nil:
		return agentStatus{"online, endpoint not answering since " + l.FailingSince.UTC().Format(site.TimeFormat), "failing"}
	case l.State == LiveNoEndpoint:
		return agentStatus{"online, no endpoint", "online"}
	}
	return agentStatus{"online, endpoint not checked yet", "online"}
}

// priceWords is a price of amount lamports (0: free) per unit, in SOL
// and, at rate usdPerSOL when known, in USD.
func priceWords(amount uint64, unit string, usdPerSOL *float64) string {
	if amount == 0 {
		return "free per " + unit
	}
	sol := float64(amount) / lamportsPerSOL
	s := decimal(sol, 9) + " SOL"
	if usdPerSOL != nil {
		s += " (" + usdText(roundSignificant(sol**usdPerSOL, 12)) + ")"
	}
	return s + " per " + unit
}

// usdText is a USD amount as a person reads it: cents from a cent up
// ($18.52), two significant digits below ($0.00075).
func usdText(usd float64) string {
	switch {
	case usd == 0:
		return "$0"
	case usd >= 0.01:
		return "$" + strconv.FormatFloat(usd, 'f', 2, 64)
	}
	prec := min(int(math.Ceil(-math.Log10(usd)))+1, 12)
	return "$" + decimal(usd, prec)
}

// priceAmount is a row's price in its own currency: SOL for lamports, the
// token for a token row (USDC with its six decimals; another token in
// its smallest unit).
func priceAmount(p PriceRow, sol float64) string {
	switch p.Currency {
	case currencyLamprt:
		return decimal(sol, 9) + " SOL"
	case currencyWSOL:
		return decimal(sol, 9) + " wSOL"
	case currencyUSDC:
		return decimal(float64(p.Amount)/usdcUnits, 6) + " USDC"
	}
	return fmt.Sprintf("%d %s (smallest units)", p.Amount, p.Currency)
}

// decimal formats x with at most prec decimals, no trailing zeros.
func decimal(x float64, prec int) string {
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// reputationWords is the weighted score in a few words, for lists.
func reputationWords(w Weighted) string {
	if w.N == 0 || w.Score == nil {
		return "no reports yet"
	}
	return fmt.Sprintf("reputation %.2f (%s, %d paid)", *w.Score, plural(w.N, "report"), w.Paid)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// pageData is what the agent template reads: the view and its wording.
type pageData struct {
	V      *DiscoveryView
	Status agentStatus
	// Listing is the catalog listing, its name and description left out
	// where the page shows them already.
	Listing         *Listing
	LiveBanner      bool
	Prices          []priceText
	RateText        string
	Weighted, Plain string
	Dims            []dimRow
	LivenessText    string
	EndpointLink    bool // the endpoint is http or https
	ListingURLLink  bool // the listing's URL is http or https
	Call            howToCall
}

type priceText struct{ Unit, SOL, USD, Network, Tier string }

type dimRow struct{ Name, Weighted, Plain string }

func (a *API) newPageData(r *http.Request, ag *Agent, v *DiscoveryView) pageData {
	p := pageData{V: v, LiveBanner: v.Registered && v.Listing != nil,
		Status: statusOf(v.CatalogOnly, v.Online, v.LastHeartbeat, v.Liveness)}
	if l := v.Listing; l != nil {
		shown := *l
		if shown.Name == v.Name {
			shown.Name = ""
		}
		if shown.Description == v.Description {
			shown.Description = ""
		}
		p.Listing, p.ListingURLLink = &shown, webURL(l.URL)
	}
	for _, row := range v.Pricing {
		t := priceText{Unit: row.Unit, Network: row.Network, Tier: string(row.Tier), SOL: "free", USD: "free"}
		if row.Currency != currencyFree {
			t.SOL, t.USD = priceAmount(row.PriceRow, row.SOL), "—"
			if row.USD != nil {
				t.USD = usdText(*row.USD)
			}
		}
		p.Prices = append(p.Prices, t)
	}
	p.RateText = "No SOL/USD rate is known to this node: prices show in SOL only."
	if r := v.SolUSD; r != nil {
		p.RateText = fmt.Sprintf("At %s USD per SOL (%s rate, %.0f s old).", decimal(r.Rate, 4), r.Source, r.AgeS)
	}
	p.Weighted, p.Plain, p.Dims = reputationTexts(v.WeightedReputation, v.Reputation)
	p.LivenessText = livenessText(v)
	p.EndpointLink = v.Endpoint != nil && webURL(*v.Endpoint)
	p.Call = a.howToCall(r, ag, v)
	return p
}

// reputationTexts words both views of the reports: the weighted score
// first, with how many reports came from paying callers, the plain one
// beside it, and the four dimensions of each.
func reputationTexts(w Weighted, plain specReputation) (weighted, plainText string, dims []dimRow) {
	if w.N == 0 {
		return "No reputation reports yet.", "", nil
	}
	weighted = fmt.Sprintf("Weighted score %s of 1: %d of %s from paying callers.", scoreText(w.Score), w.Paid, plural(w.N, "report"))
	plainText = fmt.Sprintf("Plain score %s of 1 (every report counted alike).", scoreText(plain.Score))
	for _, d := range []struct {
		name string
		w, p *float64
	}{
		{"reliability", w.Dims.Reliability, plain.Dims.Reliability}, {"speed", w.Dims.Speed, plain.Dims.Speed},
		{"quality", w.Dims.Quality, plain.Dims.Quality}, {"settlement", w.Dims.Settlement, plain.Dims.Settlement},
	} {
		dims = append(dims, dimRow{d.name, scoreText(d.w), scoreText(d.p)})
	}
	return weighted, plainText, dims
}

func scoreText(s *float64) string {
	if s == nil {
		return "—"
	}
	return strconv.FormatFloat(*s, 'f', 2, 64)
}

// livenessText words the probes' record.
func livenessText(v *DiscoveryView) string {
	l := v.Liveness
	switch {
	case v.CatalogOnly:
		return "Not registered on the mesh: nothing is probed."
	case l.State == LiveNoEndpoint:
		return "No endpoint registered: nothing to probe."
	case l.State == LiveUnchecked:
		return "The endpoint has not been checked yet."
	case l.State == LiveReachable:
		return "Endpoint answering: its card was read " + l.CheckedAt.UTC().Format(site.TimeFormat) + "."
	}
	return "Endpoint not answering since " + l.FailingSince.UTC().Format(site.TimeFormat) + "."
}

// webURL reports whether s is an http or https URL, the only ones a page
// makes a link of.
func webURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// howToCall is the "how to call it" of an agent page.
type howToCall struct {
	// CardURL is the A2A card: the mirror on this node, else the one the
	// agent serves at its endpoint; Mirrored tells which.
	CardURL  string
	Mirrored bool
	Skills   []skillCall
}

// skillCall is a skill with its price and a command that calls it: curl
// for a free skill, mesh call otherwise.
type skillCall struct {
	ID, Name, Description string
	Tags                  []string
	Price                 string // "" when none is declared
	Command               string
}

func (a *API) howToCall(r *http.Request, ag *Agent, v *DiscoveryView) howToCall {
	var c howToCall
	switch {
	case v.Card != nil:
		c.CardURL, c.Mirrored = *v.Card, true
	case v.Endpoint != nil:
		c.CardURL = strings.TrimRight(*v.Endpoint, "/") + "/.well-known/agent.json"
	}
	if v.CatalogOnly {
		return c
	}
	full := cardView(ag.FullCard)
	base := ""
	if v.Endpoint != nil {
		base = *v.Endpoint
	}
	if full != nil && webURL(full.URL) {
		base = full.URL
	}
	agentRows := ag.pricingOf(full)
	skills := v.Skills
	if len(skills) == 0 {
		for _, cap := range v.Capabilities {
			skills = append(skills, SkillView{ID: cap, Name: cap, Tags: []string{}})
		}
	}
	var rate *float64
	if v.SolUSD != nil {
		rate = &v.SolUSD.Rate
	}
	node := httpx.BaseURL(r, a.cfg.PublicURL)
	for _, s := range skills {
		rows := agentRows
		if full != nil {
			for _, fs := range full.Skills {
				if fs.ID == s.ID && len(fs.Pricing) > 0 {
					rows = fs.Pricing
				}
			}
		}
		price := cheapestRequest(nil, rows)
		sc := skillCall{ID: s.ID, Name: s.Name, Description: s.Description, Tags: s.Tags}
		if sc.Name == "" {
			sc.Name = s.ID
		}
		if price != nil {
			sc.Price = priceWords(*price, unitRequest, rate)
		} else if usdc := cheapestIn(nil, rows, currencyUSDC); usdc != nil { // priced only in tokens: x402 v2 clients pay it
			sc.Price = priceAmount(PriceRow{Amount: *usdc, Currency: currencyUSDC}, 0) + " per " + unitRequest
		}
		tokensOnly := price == nil && sc.Price != ""
		switch {
		case (price != nil && *price == 0 || tokensOnly) && webURL(base):
			sc.Command = "curl -X POST " + shellQuote(strings.TrimRight(base, "/")+"/v1/"+url.PathEscape(s.ID)) +
				" -H 'Content-Type: application/json' -d '{}'"
			if tokensOnly { // mesh call pays lamports only: x402's own clients pay tokens
				sc.Command += "\n# answers 402 with PAYMENT-REQUIRED: pay it with an x402 v2 client (@x402/fetch with @x402/svm)"
			}
		default:
			sc.Command = "mesh call " + shellQuote(ag.ID) + " " + shellQuote(s.ID) + " --data '{}'"
			if price != nil {
				sc.Command += " --max-lamports " + strconv.FormatUint(*price, 10)
			}
			if node != "" {
				sc.Command += " --node " + shellQuote(node)
			}
		}
		c.Skills = append(c.Skills, sc)
	}
	return c
}

// shellSafe are the words a POSIX shell takes as they are.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote is s as one word of a POSIX shell command.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
