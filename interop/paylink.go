package interop

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/gagliardetto/solana-go"
)

// payLinkScheme opens a native-coin payment link (the Solana Pay transfer
// request form).
const (
	payLinkScheme = "solana:"
	maxPayLinkLen = 2048
	maxMemoLen    = 256
)

// PayLink is a payment link: pay Lamports to Address with memo Memo.
// On the wire: solana:<address>?amount=<whole coins>&label=<label>&memo=<memo>,
// the amount an exact decimal made from integer lamports.
type PayLink struct {
	Address  string
	Lamports uint64
	Label    string
	Memo     string
}

// String renders the link. Query values are percent-encoded.
func (p PayLink) String() string {
	q := "amount=" + FormatCoins(p.Lamports)
	if p.Label != "" {
		q += "&label=" + url.QueryEscape(p.Label)
	}
	if p.Memo != "" {
		q += "&memo=" + url.QueryEscape(p.Memo)
	}
	return payLinkScheme + p.Address + "?" + q
}

// ParsePayLink parses a payment link for the native coin. The address must
// be a base58 32-byte public key and the amount an exact decimal of coins;
// links for tokens (spl-token) are refused.
func ParsePayLink(s string) (PayLink, error) {
	var p PayLink
	if len(s) > maxPayLinkLen {
		return p, fmt.Errorf("%w: longer than %d bytes", ErrBadPayLink, maxPayLinkLen)
	}
	rest, ok := strings.CutPrefix(s, payLinkScheme)
	if !ok {
		return p, fmt.Errorf("%w: must start with %q", ErrBadPayLink, payLinkScheme)
	}
	addr, rawQuery, _ := strings.Cut(rest, "?")
	if _, err := solana.PublicKeyFromBase58(addr); err != nil {
		return p, fmt.Errorf("%w: address %q is not a base58 public key", ErrBadPayLink, addr)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, fmt.Errorf("%w: query: %v", ErrBadPayLink, err)
	}
	for k, v := range q {
		if len(v) > 1 {
			return p, fmt.Errorf("%w: %s given twice", ErrBadPayLink, k)
		}
	}
	if q.Has("spl-token") {
		return p, fmt.Errorf("%w: token transfers are not supported", ErrBadPayLink)
	}
	if !q.Has("amount") {
		return p, fmt.Errorf("%w: amount is required", ErrBadPayLink)
	}
	lamports, err := ParseCoins(q.Get("amount"))
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrBadPayLink, err)
	}
	memo := q.Get("memo")
	if len(memo) > maxMemoLen {
		return p, fmt.Errorf("%w: memo longer than %d bytes", ErrBadPayLink, maxMemoLen)
	}
	return PayLink{Address: addr, Lamports: lamports, Label: q.Get("label"), Memo: memo}, nil
}
