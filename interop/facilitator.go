package interop

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/agentmesh/mesh/internal/redact"
)

// facilitatorSettler settles x402 v2 payments through an x402
// facilitator's HTTP API (GET /supported, POST /verify, POST /settle): the
// facilitator's key is the fee payer, co-signs and submits. The agent
// still runs every rule and claims the payment before it asks /settle, so
// a facilitator without its own replay guard settles nothing twice here.
type facilitatorSettler struct {
	url    string
	client *http.Client
	payer  solana.PublicKey
	// timeout bounds /supported and /verify; settleTimeout /settle, which
	// waits for confirmation.
	timeout, settleTimeout time.Duration
	log                    *slog.Logger
}

// maxFacilitatorAnswer bounds what is read of a facilitator's answer.
const maxFacilitatorAnswer = 64 << 10

// facilitatorRequest is the body of /verify and /settle.
type facilitatorRequest struct {
	X402Version         int                 `json:"x402Version"`
	PaymentPayload      any                 `json:"paymentPayload"`
	PaymentRequirements PaymentRequirements `json:"paymentRequirements"`
}

// newFacilitator asks the facilitator at url which fee payer it uses for
// the exact scheme on network (a CAIP-2 id).
func newFacilitator(ctx context.Context, url, network string, rpcTimeout, settleTimeout time.Duration, log *slog.Logger) (*facilitatorSettler, error) {
	f := &facilitatorSettler{url: strings.TrimRight(url, "/"), client: &http.Client{}, timeout: rpcTimeout, settleTimeout: settleTimeout, log: log}
	var sup struct {
		Kinds []struct {
			X402Version int               `json:"x402Version"`
			Scheme      string            `json:"scheme"`
			Network     string            `json:"network"`
			Extra       RequirementsExtra `json:"extra"`
		} `json:"kinds"`
	}
	if err := f.do(ctx, f.timeout, http.MethodGet, "/supported", nil, &sup); err != nil {
		return nil, fmt.Errorf("interop: asking the x402 facilitator %s what it supports: %s", redact.URL(f.url), redact.Error(err))
	}
	for _, k := range sup.Kinds {
		if k.X402Version == X402Version2 && k.Scheme == schemeExact && k.Network == network {
			if f.payer, _ = solana.PublicKeyFromBase58(k.Extra.FeePayer); !f.payer.IsZero() {
				return f, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: the x402 facilitator %s names no fee payer for the exact scheme on %s", ErrConfig, redact.URL(f.url), network)
}

func (f *facilitatorSettler) feePayer() solana.PublicKey { return f.payer }

// request is the body the facilitator gets: the agent's own requirements,
// and the client's transaction in a v2 payload that accepts them.
func (f *facilitatorSettler) request(ep *exactPayment) facilitatorRequest {
	payload := map[string]any{"x402Version": X402Version2, "resource": ep.resource, "accepted": ep.req,
		"payload": map[string]string{"transaction": base64.StdEncoding.EncodeToString(ep.tx.raw)}}
	return facilitatorRequest{X402Version: X402Version2, PaymentPayload: payload, PaymentRequirements: ep.req}
}

func (f *facilitatorSettler) verify(ctx context.Context, ep *exactPayment) error {
	var v struct {
		IsValid       bool   `json:"isValid"`
		InvalidReason string `json:"invalidReason"`
	}
	if err := f.do(ctx, f.timeout, http.MethodPost, "/verify", f.request(ep), &v); err != nil {
		f.log.Warn("x402 v2: the facilitator's /verify failed", "err", redact.Error(err))
		return ErrFacilitator
	}
	if !v.IsValid {
		f.log.Info("x402 v2: the facilitator found a payment invalid", "reason", v.InvalidReason)
		return refusedBy(v.InvalidReason)
	}
	return nil
}

func (f *facilitatorSettler) settle(ctx context.Context, ep *exactPayment, _ bool) (string, error) {
	var s SettleResponse
	err := f.do(ctx, f.settleTimeout, http.MethodPost, "/settle", f.request(ep), &s)
	switch {
	case err != nil: // lost or timed out: it may have been sent
		f.log.Warn("x402 v2: the facilitator's /settle failed", "err", redact.Error(err))
		return "", ErrSettlementPending
	case s.Success && s.Transaction != "":
		return s.Transaction, nil
	case s.ErrorReason == "settlement_pending" || s.ErrorReason == "duplicate_settlement":
		return "", ErrSettlementPending
	case s.Transaction != "":
		f.log.Info("x402 v2: the facilitator's transaction failed", "transaction", s.Transaction, "reason", s.ErrorReason)
		return "", ErrTxFailed.With("transaction %s failed on chain", s.Transaction)
	}
	f.log.Info("x402 v2: the facilitator refused a payment", "reason", s.ErrorReason)
	return "", refusedBy(s.ErrorReason)
}

// reasonCode is an x402 refusal reason as it may reach a client: a stable
// snake_case code, nothing else an upstream said.
var reasonCode = regexp.MustCompile(`^[a-z0-9_]{1,80}$`)

// refusedBy is the client's error for a facilitator's refusal reason: its
// x402 code when it is one, which is all of the refusal the client sees.
func refusedBy(reason string) error {
	switch {
	case strings.Contains(reason, "blockhash"):
		return ErrBlockhashExpired
	case !reasonCode.MatchString(reason):
		return ErrTxRejected.With("the x402 facilitator refused the payment")
	}
	return ErrTxRejected.With("the x402 facilitator refused the payment: %s", reason)
}

// do runs one request within timeout and decodes its JSON answer into
// out. A 4xx answer still decodes (x402's facilitators answer a refusal
// with a VerifyResponse or SettleResponse); a 5xx one is an error.
func (f *facilitatorSettler) do(ctx context.Context, timeout time.Duration, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxFacilitatorAnswer))
	if err != nil {
		return err
	}
	if res.StatusCode >= 500 || res.StatusCode >= 300 && method == http.MethodGet {
		return fmt.Errorf("%s %s answered %s", method, path, res.Status)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s answered %d, not JSON", method, path, res.StatusCode)
	}
	return nil
}
