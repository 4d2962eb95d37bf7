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

// CAIP-2 ids of the networks, as x402 v2 names them: "solana:" and the
// first 32 characters of the genesis hash (@x402/svm's
// SOLANA_DEVNET_CAIP2 and SOLANA_MAINNET_CAIP2).
const (
	CAIP2Devnet  = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"
	CAIP2Mainnet = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
)

// CAIP2 returns the CAIP-2 id of a known network tag; x402 v1's names of
// the networks ("solana-devnet", "solana") and the CAIP-2 ids themselves
// are taken too.
func CAIP2(network string) (string, bool) {
	switch network {
	case NetworkDevnet, "solana-devnet", CAIP2Devnet:
		return CAIP2Devnet, true
	case NetworkMainnet, "solana", CAIP2Mainnet:
		return CAIP2Mainnet, true
	}
	return "", false
}

// Currencies of SPL token pricing rows (spec 2.5 and 9: a new currency is
// a new row). A token row's amount is in the token's smallest unit
// (USDC: millionths; wSOL: lamports) and its asset names the mint.
const (
	CurrencyUSDC = "USDC"
	CurrencyWSOL = "wSOL"
)

// Mints of the known currencies: USDC's as @x402/svm knows them, and the
// native mint (wrapped SOL), the same on every network.
const (
	MintUSDCDevnet  = "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU"
	MintUSDCMainnet = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
	MintWSOL        = "So11111111111111111111111111111111111111112"
)

// KnownMint is the mint of currency on network, for the currencies whose
// mint a pricing row may leave out.
func KnownMint(currency, network string) (string, bool) {
	switch {
	case currency == CurrencyWSOL:
		return MintWSOL, true
	case currency == CurrencyUSDC && network == NetworkDevnet:
		return MintUSDCDevnet, true
	case currency == CurrencyUSDC && network == NetworkMainnet:
		return MintUSDCMainnet, true
	}
	return "", false
}

// CurrencyOfMint is the currency of a known mint (USDC's on either
// network, wrapped SOL's); "" for any other.
func CurrencyOfMint(mint string) string {
	switch mint {
	case MintUSDCDevnet, MintUSDCMainnet:
		return CurrencyUSDC
	case MintWSOL:
		return CurrencyWSOL
	}
	return ""
}

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
func FormatCoins(lamports uint64) string { return FormatUnits(lamports, 9) }

// FormatUnits renders an amount in a token's smallest unit as an exact
// decimal of whole tokens of the given decimals (0 to 18), without
// trailing zeros: FormatUnits(10000, 6) is "0.01".
func FormatUnits(amount uint64, decimals int) string {
	unit := uint64(1)
	for range decimals {
		unit *= 10
	}
	whole, frac := amount/unit, amount%unit
	if frac == 0 {
		return strconv.FormatUint(whole, 10)
	}
	f := strings.TrimRight(fmt.Sprintf("%0*d", decimals, frac), "0")
	return strconv.FormatUint(whole, 10) + "." + f
}

// PriceText is a pricing row's amount in words a person reads: lamports
// with their value in SOL, USDC and wSOL in whole tokens, another token
// in its smallest unit with its mint.
func PriceText(p Price) string {
	switch p.Currency {
	case CurrencyFree:
		return "free"
	case CurrencyLamports:
		return fmt.Sprintf("%d lamports (%s %s)", p.Amount, FormatCoins(p.Amount), NativeAsset)
	case CurrencyUSDC:
		return FormatUnits(p.Amount, 6) + " " + CurrencyUSDC
	case CurrencyWSOL:
		return FormatCoins(p.Amount) + " " + CurrencyWSOL
	}
	if p.Currency == "" {
		return fmt.Sprintf("%d smallest units of the token of mint %s", p.Amount, p.Asset)
	}
	return fmt.Sprintf("%d smallest units of %s (mint %s)", p.Amount, p.Currency, p.Asset)
}

// ParseCoins parses an exact decimal number of whole coins (at most nine
// decimals, no sign, no exponent) into lamports.
func ParseCoins(s string) (uint64, error) { return ParseUnits(s, 9) }

// ParseUnits parses an exact decimal amount of a token with the given
// number of decimals (no sign, no exponent, at most that many fraction
// digits) into its smallest unit: ParseUnits("0.01", 6) is 10000.
func ParseUnits(s string, decimals int) (uint64, error) {
	if s == "" || len(s) > 32 || decimals < 0 || decimals > 18 {
		return 0, fmt.Errorf("%w: %q", ErrBadAmount, s)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || hasDot && (frac == "" || !digits(frac)) || len(frac) > decimals {
		return 0, fmt.Errorf("%w: %q is not a decimal with at most %d fraction digits", ErrBadAmount, s, decimals)
	}
	unit := uint64(1)
	for range decimals {
		unit *= 10
	}
	w, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || w > (1<<64-1)/unit {
		return 0, fmt.Errorf("%w: %q is too large", ErrBadAmount, s)
	}
	var f uint64
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", decimals-len(frac)), 10, 64)
	}
	total := w*unit + f
	if total < w*unit {
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
