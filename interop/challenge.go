package interop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
)

// X402Version is the only x402 version spoken.
const X402Version = 1

// Headers of the x402 exchange (spec 4.2, 4.3).
const (
	HeaderPaymentProof     = "X-Payment-Proof"
	HeaderPaymentNonce     = "X-Payment-Nonce"
	HeaderPaymentNetwork   = "X-Payment-Network"
	HeaderPaymentAddress   = "X-Payment-Address"
	HeaderPaymentAmount    = "X-Payment-Amount"
	HeaderPaymentExpires   = "X-Payment-Expires"
	HeaderAPIKey           = "X-Api-Key"
	HeaderDebitedLamports  = "X-Debited-Lamports"
	HeaderBalanceRemaining = "X-Balance-Remaining"
	// HeaderPaymentReplay marks an answer served from a cached entitlement.
	HeaderPaymentReplay = "X-Payment-Replay"
	// HeaderPostpayDue is set on a post-paid answer: pay the invoice (the
	// X-Payment-* headers) before this time.
	HeaderPostpayDue = "X-Postpay-Due"
)

const (
	schemeExact        = "exact"
	maxChallengeBody   = 64 << 10
	maxChallengeOffers = 16
	maxNonceLen        = 128
)

// Offer is one way to pay a challenge, whichever shape it came in.
type Offer struct {
	Scheme    string
	Network   string
	PayTo     string
	Lamports  uint64
	Asset     string
	Nonce     string
	Resource  string
	PayURL    string
	ExpiresAt time.Time // zero when the challenge did not say
}

// Challenge is a parsed 402 answer.
type Challenge struct {
	Version int
	Offers  []Offer
	Hint    string
	// Code and Detail are the error fields of this project's 402 body: why
	// the previous attempt was refused (payment_required on a first call).
	Code, Detail string
}

// challengeA is the shape this project emits: spec 2.6 shape A, plus
// expiresAt in each offer and the {detail, code} error fields every error
// answer of the node carries.
type challengeA struct {
	X402Version int       `json:"x402Version"`
	Accepts     []acceptA `json:"accepts"`
	Hint        string    `json:"hint"`
	Detail      string    `json:"detail"`
	Code        string    `json:"code"`
}

type acceptA struct {
	Scheme      string `json:"scheme"`
	Network     string `json:"network"`
	Resource    string `json:"resource"`
	PayTo       string `json:"payTo"`
	Asset       string `json:"asset"`
	Lamports    string `json:"lamports"`
	Nonce       string `json:"nonce"`
	ChainPayURL string `json:"chainPayUrl"`
	ExpiresAt   string `json:"expiresAt,omitempty"`
}

// BuildChallenge renders the 402 body for one offer (shape A) and sets the
// header form of the same challenge on h.
func BuildChallenge(h http.Header, o Offer, code, detail string) []byte {
	link := PayLink{Address: o.PayTo, Lamports: o.Lamports, Label: o.Resource, Memo: o.Nonce}.String()
	a := acceptA{
		Scheme: schemeExact, Network: o.Network, Resource: o.Resource, PayTo: o.PayTo, Asset: NativeAsset,
		Lamports: strconv.FormatUint(o.Lamports, 10), Nonce: o.Nonce, ChainPayURL: link,
	}
	if !o.ExpiresAt.IsZero() {
		a.ExpiresAt = o.ExpiresAt.UTC().Format(time.RFC3339)
		h.Set(HeaderPaymentExpires, a.ExpiresAt)
	}
	h.Set(HeaderPaymentNetwork, o.Network)
	h.Set(HeaderPaymentAddress, o.PayTo)
	h.Set(HeaderPaymentAmount, a.Lamports)
	h.Set(HeaderPaymentNonce, o.Nonce)
	b, _ := json.Marshal(challengeA{
		X402Version: X402Version, Accepts: []acceptA{a}, Detail: detail, Code: code,
		Hint: fmt.Sprintf("Pay %s lamports (%s %s) to %s on %s with a memo instruction whose data is exactly the nonce, "+
			"then retry the same request with headers %s: <transaction signature> and %s: <nonce>.",
			a.Lamports, FormatCoins(o.Lamports), NativeAsset, o.PayTo, o.Network, HeaderPaymentProof, HeaderPaymentNonce),
	})
	return b
}

// tokensOnlyChallenge renders the 402 body of a skill priced only in SPL
// tokens (rows), which x402 v2 pays: the seed's shape with no offer (it
// has nothing to pay in lamports), its hint saying where the offers are.
func tokensOnlyChallenge(rows Prices, payTo, code, detail string) []byte {
	prices := make([]string, len(rows))
	for i, p := range rows {
		prices[i] = PriceText(p)
	}
	b, _ := json.Marshal(challengeA{
		X402Version: X402Version, Accepts: []acceptA{}, Detail: detail, Code: code,
		Hint: fmt.Sprintf("This skill is priced only in SPL tokens (%s, to %s): nothing is paid in lamports. Pay with x402 v2: "+
			"the %s header (base64 JSON) lists the offers; sign the token transfer one describes, with its extra.feePayer as fee payer "+
			"and its extra.memo as memo, and retry the same request with %s. The x402 project's clients (@x402/fetch with @x402/svm) do this.",
			strings.Join(prices, " or "), payTo, strings.ToUpper(HeaderPaymentRequired), strings.ToUpper(HeaderPaymentSignature)),
	})
	return b
}

// rawChallenge reads both body shapes at once: shape A (payTo, lamports,
// per-offer chainPayUrl) and shape B (address, amount, currency, expiresAt,
// top-level nonce and chainPayUrl).
type rawChallenge struct {
	X402Version json.Number `json:"x402Version"`
	Accepts     []rawAccept `json:"accepts"`
	Hint        string      `json:"hint"`
	Nonce       string      `json:"nonce"`
	ChainPayURL string      `json:"chainPayUrl"`
	Detail      string      `json:"detail"`
	Code        string      `json:"code"`
}

type rawAccept struct {
	Scheme      string          `json:"scheme"`
	Network     string          `json:"network"`
	Resource    string          `json:"resource"`
	PayTo       string          `json:"payTo"`
	Address     string          `json:"address"`
	Asset       string          `json:"asset"`
	Lamports    json.RawMessage `json:"lamports"`
	Amount      json.RawMessage `json:"amount"`
	Currency    string          `json:"currency"`
	Nonce       string          `json:"nonce"`
	ChainPayURL string          `json:"chainPayUrl"`
	ExpiresAt   json.RawMessage `json:"expiresAt"`
}

// ParseChallenge reads a 402 answer: body shape A or B, or the header form
// (X-Payment-Network, -Address, -Amount, -Nonce) when the body has no
// usable offer. Offers that cannot be paid in native lamports to a valid
// address with a nonce are dropped; no offer left is ErrBadChallenge.
func ParseChallenge(h http.Header, body []byte) (Challenge, error) {
	var c Challenge
	if len(body) > maxChallengeBody {
		return c, fmt.Errorf("%w: body larger than %d bytes", ErrBadChallenge, maxChallengeBody)
	}
	var raw rawChallenge
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		if dec.Decode(&raw) == nil {
			c.Hint, c.Code, c.Detail = raw.Hint, raw.Code, raw.Detail
			if v, err := raw.X402Version.Int64(); err == nil {
				c.Version = int(v)
			}
			for i, a := range raw.Accepts {
				if i == maxChallengeOffers {
					break
				}
				if o, ok := a.offer(raw); ok {
					c.Offers = append(c.Offers, o)
				}
			}
		}
	}
	if len(c.Offers) == 0 && h != nil {
		if o, ok := headerOffer(h); ok {
			c.Offers = append(c.Offers, o)
		}
	}
	if c.Version == 0 {
		c.Version = X402Version
	}
	if c.Version != X402Version {
		return c, fmt.Errorf("%w: x402Version %d is not supported", ErrBadChallenge, c.Version)
	}
	if len(c.Offers) == 0 {
		return c, fmt.Errorf("%w: no offer payable in native lamports", ErrBadChallenge)
	}
	return c, nil
}

func (a rawAccept) offer(top rawChallenge) (Offer, bool) {
	o := Offer{Scheme: a.Scheme, Network: a.Network, Resource: a.Resource, Asset: a.Asset,
		PayTo: a.PayTo, Nonce: a.Nonce, PayURL: a.ChainPayURL}
	if o.Scheme == "" {
		o.Scheme = schemeExact
	}
	if o.PayTo == "" {
		o.PayTo = a.Address
	}
	if o.Nonce == "" {
		o.Nonce = top.Nonce
	}
	if o.PayURL == "" {
		o.PayURL = top.ChainPayURL
	}
	amount := a.Lamports
	if len(amount) == 0 {
		amount = a.Amount
		if a.Currency != "" && a.Currency != CurrencyLamports {
			return o, false
		}
	}
	n, ok := jsonUint(amount)
	if !ok {
		return o, false
	}
	o.Lamports = n
	o.ExpiresAt = jsonTime(a.ExpiresAt)
	return o, o.valid()
}

func headerOffer(h http.Header) (Offer, bool) {
	n, err := strconv.ParseUint(h.Get(HeaderPaymentAmount), 10, 64)
	if err != nil {
		return Offer{}, false
	}
	o := Offer{Scheme: schemeExact, Network: h.Get(HeaderPaymentNetwork), PayTo: h.Get(HeaderPaymentAddress),
		Lamports: n, Nonce: h.Get(HeaderPaymentNonce), Asset: NativeAsset}
	if t, err := time.Parse(time.RFC3339, h.Get(HeaderPaymentExpires)); err == nil {
		o.ExpiresAt = t
	}
	return o, o.valid()
}

// valid: an exact offer of a positive native amount to a real address,
// with a nonce that fits in a memo.
func (o Offer) valid() bool {
	if o.Scheme != schemeExact || o.Network == "" || o.Lamports == 0 || validNonce(o.Nonce) != nil {
		return false
	}
	if o.Asset != "" && o.Asset != NativeAsset && o.Asset != CurrencyLamports {
		return false
	}
	_, err := solana.PublicKeyFromBase58(o.PayTo)
	return err == nil
}

func validNonce(n string) error {
	if len(n) == 0 || len(n) > maxNonceLen {
		return fmt.Errorf("nonce must be 1..%d characters", maxNonceLen)
	}
	for i := 0; i < len(n); i++ {
		if n[i] <= ' ' || n[i] > '~' {
			return fmt.Errorf("nonce must be printable ASCII")
		}
	}
	return nil
}

// jsonUint reads a non-negative integer given as a JSON number or string.
func jsonUint(raw json.RawMessage) (uint64, bool) {
	s := string(bytes.TrimSpace(raw))
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// jsonTime reads an RFC 3339 string or Unix seconds; zero when neither.
func jsonTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return t
		}
		return time.Time{}
	}
	if n, ok := jsonUint(raw); ok && n < 1<<40 {
		return time.Unix(int64(n), 0)
	}
	return time.Time{}
}
