package interop

import (
	"fmt"
	"strconv"
	"strings"
)

// Network tags of pricing rows and payment blocks (spec 2.5). The keypair
// is the same on both networks: moving is a change of tag and RPC URL.
const (
	// NetworkDevnet is the test network; its coins have no value.
	NetworkDevnet = "chain-devnet"
	// NetworkMainnet is the main network.
	NetworkMainnet = "chain"
)

// Genesis hashes that identify the networks; Start refuses an RPC endpoint
// whose getGenesisHash answers something else.
const (
	GenesisDevnet  = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"
	GenesisMainnet = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"
)

// Currencies and units of pricing rows.
const (
	CurrencyLamports = "lamports"
	CurrencyFree     = "free"
	UnitRequest      = "request"
	// NativeAsset names the native coin in x402 offers.
	NativeAsset = "SOL"
	// LamportsPerCoin: 1 native coin = 1,000,000,000 lamports.
	LamportsPerCoin = 1_000_000_000
)

// GenesisHash returns the genesis hash of a known network tag.
func GenesisHash(network string) (string, bool) {
	switch network {
	case NetworkDevnet:
		return GenesisDevnet, true
	case NetworkMainnet:
		return GenesisMainnet, true
	}
	return "", false
}

// FormatCoins renders integer lamports as an exact decimal number of whole
// coins, without trailing zeros: 1500000000 -> "1.5", 1 -> "0.000000001".
func FormatCoins(lamports uint64) string {
	whole, frac := lamports/LamportsPerCoin, lamports%LamportsPerCoin
	if frac == 0 {
		return strconv.FormatUint(whole, 10)
	}
	f := strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	return strconv.FormatUint(whole, 10) + "." + f
}

// ParseCoins parses an exact decimal number of whole coins (at most nine
// decimals, no sign, no exponent) into lamports.
func ParseCoins(s string) (uint64, error) {
	if s == "" || len(s) > 32 {
		return 0, fmt.Errorf("%w: %q", ErrBadAmount, s)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || hasDot && (frac == "" || !digits(frac)) || len(frac) > 9 {
		return 0, fmt.Errorf("%w: %q is not a decimal with at most 9 fraction digits", ErrBadAmount, s)
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || w > (1<<64-1)/LamportsPerCoin {
		return 0, fmt.Errorf("%w: %q is too large", ErrBadAmount, s)
	}
	var f uint64
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	total := w*LamportsPerCoin + f
	if total < w*LamportsPerCoin {
		return 0, fmt.Errorf("%w: %q is too large", ErrBadAmount, s)
	}
	return total, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
