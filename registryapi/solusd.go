package registryapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"
)

// SolUSDConfig says where the SOL/USD rate of the max_price_usd filter
// comes from: a fixed rate, or a URL polled every Interval, each fetch
// bounded by Timeout. The URL answers a JSON number (the USD price of one
// SOL) or an object {"usd": number}; anything else, a non-2xx status or a
// body over 4 KiB leaves the last rate in place.
type SolUSDConfig struct {
	Fixed    float64
	URL      string
	Interval time.Duration
	Timeout  time.Duration
	Client   *http.Client // nil: http.DefaultClient
	Logger   *slog.Logger
	Now      func() time.Time // nil: time.Now
}

// SolUSDRate is a known rate and when it was read.
type SolUSDRate struct {
	USD    float64   `json:"rate"`
	At     time.Time `json:"at"`
	Source string    `json:"source"` // "fixed" or "url"
}

// SolUSD holds the current rate.
type SolUSD struct {
	cfg  SolUSDConfig
	mu   sync.Mutex
	rate *SolUSDRate
}

const maxRateBody = 4 << 10

// NewSolUSD returns the rate source of cfg; it starts nothing.
func NewSolUSD(cfg SolUSDConfig) *SolUSD {
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &SolUSD{cfg: cfg}
}

// Rate returns the current rate, false when none is known. A fixed rate
// is read anew at every call (age 0).
func (s *SolUSD) Rate(now time.Time) (SolUSDRate, bool) {
	if s == nil {
		return SolUSDRate{}, false
	}
	if s.cfg.Fixed > 0 {
		return SolUSDRate{USD: s.cfg.Fixed, At: now, Source: "fixed"}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rate == nil {
		return SolUSDRate{}, false
	}
	return *s.rate, true
}

// Run polls the URL until ctx ends; without a URL it returns at once.
func (s *SolUSD) Run(ctx context.Context) {
	if s.cfg.URL == "" || s.cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.poll(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("SOL/USD rate not read", "url", s.cfg.URL, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *SolUSD) poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return err
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRateBody+1))
	if err != nil {
		return err
	}
	usd, err := parseRate(body)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.rate = &SolUSDRate{USD: usd, At: s.cfg.Now(), Source: "url"}
	s.mu.Unlock()
	return nil
}

// parseRate reads a JSON number or {"usd": number}: positive and finite.
func parseRate(b []byte) (float64, error) {
	if len(b) > maxRateBody {
		return 0, errors.New("answer over 4 KiB")
	}
	var v struct {
		USD *float64 `json:"usd"`
	}
	var usd float64
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &v); err != nil || v.USD == nil {
			return 0, errors.New(`answer is not {"usd": number}`)
		}
		usd = *v.USD
	} else if err := json.Unmarshal(b, &usd); err != nil {
		return 0, errors.New("answer is not a JSON number")
	}
	if usd <= 0 || math.IsInf(usd, 0) || math.IsNaN(usd) {
		return 0, errors.New("rate is not a positive number")
	}
	return usd, nil
}
