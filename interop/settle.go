package interop

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// A settler co-signs and submits x402 v2 payments that passed the rules:
// the agent's own fee payer (a key and the chain RPC), or an x402
// facilitator. Neither ever puts what an upstream said into an error a
// client sees: causes are logged, the client gets a sentinel.
type settler interface {
	feePayer() solana.PublicKey
	// verify checks what the rules cannot see in the transaction alone:
	// that its blockhash is still valid (or the facilitator's /verify).
	verify(ctx context.Context, ep *exactPayment) error
	// settle signs, submits and waits until the transaction reaches the
	// commitment, and returns its signature. ErrSettlementPending leaves
	// the outcome open (it may still land): the payment stays claimed and
	// settle is asked again, resume true, when the client retries. Any
	// other error means it did not land and never will.
	settle(ctx context.Context, ep *exactPayment, resume bool) (string, error)
}

// exactPayment is a payment transaction that passed the rules, with the
// requirements it meets.
type exactPayment struct {
	tx       *svmTx
	pay      exactPay
	req      PaymentRequirements
	resource ResourceInfo
}

// settlePoll is how often a submitted transaction's status is read.
const settlePoll = 500 * time.Millisecond

// localSettler is the agent's own fee payer.
type localSettler struct {
	key   *Wallet
	chain *Chain
	log   *slog.Logger
}

func (s *localSettler) feePayer() solana.PublicKey { return s.key.PublicKey() }

func (s *localSettler) verify(ctx context.Context, ep *exactPayment) error {
	ok, err := s.chain.blockhashValid(ctx, ep.tx.hash)
	if err != nil {
		s.log.Warn("x402 v2: checking a payment's blockhash", "err", err)
		return ErrRPC
	}
	if !ok {
		return ErrBlockhashExpired
	}
	return nil
}

func (s *localSettler) settle(ctx context.Context, ep *exactPayment, resume bool) (string, error) {
	raw, sig := ep.tx.withFeePayerSig(s.key)
	if resume { // sent before: it may have landed meanwhile
		st, err := s.chain.signatureStatus(ctx, sig)
		switch {
		case err != nil:
			s.log.Warn("x402 v2: reading a pending payment's status", "signature", sig, "err", err)
			return "", ErrSettlementPending
		case st != nil && st.Err != nil:
			return "", ErrTxFailed.With("transaction %s failed on chain", sig)
		case st != nil && reached(st.ConfirmationStatus, s.chain.commitment):
			return sig.String(), nil
		}
	}
	refused, err := s.chain.sendRaw(ctx, raw)
	switch {
	case refused && !resume:
		s.log.Info("x402 v2: the RPC refused a payment transaction", "signature", sig, "err", err)
		return "", ErrTxRejected
	case err != nil: // lost on the way, or refused as already taken: it may land
		s.log.Warn("x402 v2: sending a payment transaction", "signature", sig, "err", err)
	}
	err = s.chain.waitStatus(ctx, sig, settlePoll, func(ctx context.Context) error {
		if ok, err := s.chain.blockhashValid(ctx, ep.tx.hash); err == nil && !ok {
			return ErrBlockhashExpired.With("transaction %s did not land before its blockhash expired; nothing was paid", sig)
		}
		return nil
	})
	switch {
	case err == nil:
		return sig.String(), nil
	case errors.Is(err, ErrBlockhashExpired):
		return "", err
	case errors.Is(err, ErrTxFailed):
		return "", ErrTxFailed.With("transaction %s failed on chain", sig)
	}
	s.log.Warn("x402 v2: waiting for a payment transaction", "signature", sig, "err", err)
	return "", ErrSettlementPending
}

// blockhashValid asks whether hash may still be used by a new transaction.
func (c *Chain) blockhashValid(ctx context.Context, hash solana.Hash) (bool, error) {
	var ok bool
	err := c.call(ctx, "isBlockhashValid", func(ctx context.Context) error {
		res, err := c.client.IsBlockhashValid(ctx, hash, rpc.CommitmentConfirmed)
		if err == nil {
			ok = res.Value
		}
		return err
	})
	return ok, err
}

// signatureStatus is the status of sig, nil when the chain has not seen it.
func (c *Chain) signatureStatus(ctx context.Context, sig solana.Signature) (*rpc.SignatureStatusesResult, error) {
	var st *rpc.SignatureStatusesResult
	err := c.call(ctx, "getSignatureStatuses", func(ctx context.Context) error {
		res, err := c.client.GetSignatureStatuses(ctx, true, sig)
		if err == nil && len(res.Value) == 1 {
			st = res.Value[0]
		}
		return err
	})
	return st, err
}

// sendRaw submits a signed wire transaction (with preflight, so that one
// that would fail is refused before it costs a fee). refused says the RPC
// answered with an error: the transaction was not taken.
func (c *Chain) sendRaw(ctx context.Context, raw []byte) (refused bool, err error) {
	err = c.call(ctx, "sendTransaction", func(ctx context.Context) error {
		_, err := c.client.SendRawTransactionWithOpts(ctx, raw, rpc.TransactionOpts{PreflightCommitment: rpc.CommitmentConfirmed})
		var re *jsonrpc.RPCError
		refused = errors.As(err, &re)
		return err
	})
	return refused, err
}
