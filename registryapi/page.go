package registryapi

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/mesh/internal/httpx"
)

// The public address of an agent (spec 3.2, 4.4), served by every node
// from its replica: GET /agent/<id> is an HTML landing page for browsers
// and the discovery card (DiscoveryView) for Accept: application/json;
// /agent/<id>/.well-known/agent.json and agent-card.json mirror the full
// card. The page escapes everything the agent or the catalog wrote
// (html/template) and loads nothing but its own stylesheet: its
// Content-Security-Policy allows no script at all.

//go:embed pages/agent.html pages/agent-page.css
var pageFiles embed.FS

var pageTemplates = template.Must(template.New("pages").Funcs(template.FuncMap{
	"rfc3339": func(t *time.Time) string { return t.UTC().Format(time.RFC3339) },
	"human":   func(t *time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).ParseFS(pageFiles, "pages/agent.html"))

var pageCSS = func() []byte {
	b, err := pageFiles.ReadFile("pages/agent-page.css")
	if err != nil {
		panic(err)
	}
	return b
}()

// PageCSP is the Content-Security-Policy of the pages: their own
// stylesheet, nothing else.
const PageCSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// pageRoutes adds the public address's routes.
func (a *API) pageRoutes(mux httpx.Router) {
	mux.Handle("GET /agent/{id}", http.HandlerFunc(a.agentPage))
	h := func(pattern string, fn httpx.HandlerFunc) { mux.Handle(pattern, httpx.Handle(a.log, fn)) }
	h("GET /agent/{id}/.well-known/agent.json", a.mirroredCard)
	h("GET /agent/{id}/.well-known/agent-card.json", a.mirroredCard)
	mux.Handle("GET /assets/agent-page.css", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Write(pageCSS)
	}))
}

// agentPage serves GET /agent/<id>: JSON to a client that asks for it,
// HTML otherwise, errors included.
func (a *API) agentPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	asJSON := wantsJSON(r.Header.Get("Accept"))
	v, err := a.agentView(r)
	switch {
	case err != nil && asJSON:
		httpx.WriteError(a.log, w, r, err)
	case err != nil:
		a.writeErrorPage(w, r, err)
	case asJSON:
		w.Header().Set("Access-Control-Allow-Origin", "*")
		httpx.WriteJSON(w, http.StatusOK, v)
	default:
		a.writePage(w, http.StatusOK, "agent", newPageData(v))
	}
}

func (a *API) agentView(r *http.Request) (*DiscoveryView, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	ag, err := a.publicAgent(r, id)
	if err != nil {
		return nil, err
	}
	return a.discovery(r, ag, a.now())
}

// mirroredCard serves the full card of a registered agent (mirrorCard).
func (a *API) mirroredCard(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ag, err := a.publicAgent(r, id)
	if err != nil {
		return err
	}
	card, err := mirrorCard(ag)
	if err != nil {
		return err
	}
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpx.WriteJSON(w, http.StatusOK, card)
	return nil
}

// writePage renders template name with data; the CSP forbids scripts.
func (a *API) writePage(w http.ResponseWriter, status int, name string, data any) {
	httpx.RenderPage(a.log, w, status, PageCSP, pageTemplates, name, data)
}

// errorPage is the data of the "error" template.
type errorPage struct{ ID, Title, Detail string }

func (a *API) writeErrorPage(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpx.Error
	if !errors.As(err, &he) {
		a.log.Error("agent page", "path", r.URL.Path, "err", err)
		he = httpx.E(http.StatusInternalServerError, "internal", "something went wrong on this node; try again")
	}
	p := errorPage{ID: "error", Title: http.StatusText(he.Status), Detail: he.Detail}
	if he.Status == http.StatusNotFound {
		p.ID, p.Title = "not-found", "No such agent"
	}
	a.writePage(w, he.Status, "error", p)
}

// wantsJSON reports whether an Accept header prefers JSON to HTML: a
// browser's (text/html first), none or */* get the page.
func wantsJSON(accept string) bool {
	var jsonQ, htmlQ float64
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				q = f
			}
		}
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			jsonQ = max(jsonQ, q)
		case mt == "text/html" || mt == "application/xhtml+xml":
			htmlQ = max(htmlQ, q)
		}
	}
	return jsonQ > 0 && jsonQ > htmlQ
}

// pageData is what the agent template reads: the view and its wording.
type pageData struct {
	V              *DiscoveryView
	LiveBanner     bool
	OnlineClass    string
	OnlineText     string
	Prices         []priceText
	RateText       string
	ReputationText string
	LivenessText   string
}

type priceText struct{ Unit, SOL, USD, Network string }

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

func newPageData(v *DiscoveryView) pageData {
	p := pageData{V: v, LiveBanner: v.Registered && v.Listing != nil}
	switch {
	case v.CatalogOnly:
		p.OnlineClass, p.OnlineText = "catalog", "listed (not on the mesh)"
	case v.Online:
		p.OnlineClass, p.OnlineText = "online", "online"
	default:
		p.OnlineClass, p.OnlineText = "offline", "offline"
	}
	for _, row := range v.Pricing {
		t := priceText{Unit: row.Unit, Network: row.Network, SOL: "free", USD: "free"}
		if row.Currency != currencyFree {
			t.SOL, t.USD = priceAmount(row.PriceRow, row.SOL), "—"
			if row.USD != nil {
				t.USD = "$" + decimal(*row.USD, 6)
			}
		}
		p.Prices = append(p.Prices, t)
	}
	p.RateText = "No SOL/USD rate is known to this node: prices show in SOL only."
	if r := v.SolUSD; r != nil {
		p.RateText = fmt.Sprintf("At %s USD per SOL (%s rate, %.0f s old).", decimal(r.Rate, 4), r.Source, r.AgeS)
	}
	p.ReputationText = "No reputation reports yet."
	if rep := v.Reputation; rep.N > 0 && rep.Score != nil {
		noun := "reports"
		if rep.N == 1 {
			noun = "report"
		}
		p.ReputationText = fmt.Sprintf("Score %.2f of 1 from %d %s.", *rep.Score, rep.N, noun)
	}
	p.LivenessText = livenessText(v)
	return p
}

// livenessText words the probes' record, against the heartbeat.
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
		return "Endpoint reachable: its card was read " + l.CheckedAt.UTC().Format("2006-01-02 15:04:05 UTC") + "."
	}
	since := l.FailingSince.UTC().Format("2006-01-02 15:04:05 UTC")
	if v.Online {
		return "Online (heartbeat) but endpoint unreachable since " + since + "."
	}
	return "Endpoint unreachable since " + since + "."
}

// decimal formats x with at most prec decimals, no trailing zeros.
func decimal(x float64, prec int) string {
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
