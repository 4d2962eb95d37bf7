package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/agentmesh/mesh/internal/fsx"
	"github.com/agentmesh/mesh/p2p"
)

// listenFile, in the data directory, keeps the libp2p addresses a node
// bound on its first start when it was given none (random ports): later
// starts listen on the same ones, so the address others know it by (a
// bootstrap's, given to --bootstrap) survives restarts.
const listenFile = "listen.json"

// startHost starts the libp2p host of cfg on the node's listen addresses.
func (n *Node) startHost(ctx context.Context, cfg p2p.Config) error {
	cfg.Listen = n.cfg.Listen
	remembered := n.rememberedListen()
	if remembered != nil {
		cfg.Listen = remembered
	}
	err := n.tryHost(ctx, cfg, remembered != nil)
	if err != nil && remembered != nil {
		n.log.Warn("cannot listen on the addresses of earlier starts; taking new ports, so peers that knew this node's address must be given the new one",
			"addrs", remembered, "err", err)
		cfg.Listen = n.cfg.Listen
		err = n.tryHost(ctx, cfg, false)
		remembered = nil
	}
	if err != nil {
		return err
	}
	if remembered == nil && n.defaultListen() {
		n.rememberListen()
	}
	return nil
}

// tryHost starts the host; with all, it fails unless every address of
// cfg.Listen is bound (libp2p starts when any one is).
func (n *Node) tryHost(ctx context.Context, cfg p2p.Config, all bool) error {
	h, err := p2p.New(cfg)
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	// The addresses for browsers, beside QUIC's, are not in cfg.Listen.
	if got := slices.DeleteFunc(h.ListenAddrs(), p2p.IsBrowserAddr); all && len(got) < len(cfg.Listen) {
		h.Close()
		return fmt.Errorf("bound %v of %v", got, cfg.Listen)
	}
	n.host = h
	return nil
}

// defaultListen reports whether the node listens where nobody asked it to
// (the default random ports) and has a data directory to remember them in.
func (n *Node) defaultListen() bool {
	return n.cfg.DataDir != "" && (len(n.cfg.Listen) == 0 || slices.Equal(n.cfg.Listen, p2p.DefaultListen))
}

// rememberedListen is what an earlier start bound, or nil.
func (n *Node) rememberedListen() []string {
	if !n.defaultListen() {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, listenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var addrs []string
	if err == nil {
		err = json.Unmarshal(b, &addrs)
	}
	if err != nil || len(addrs) == 0 {
		n.log.Warn("ignoring an unreadable "+listenFile, "err", err)
		return nil
	}
	return addrs
}

// rememberListen keeps what the host bound, but the addresses it listens
// on for browsers beside QUIC's (each start derives them anew, with the
// certificates of the day).
func (n *Node) rememberListen() {
	addrs := slices.DeleteFunc(n.host.ListenAddrs(), p2p.IsBrowserAddr)
	b, _ := json.Marshal(addrs)
	if err := fsx.WriteSecret(filepath.Join(n.cfg.DataDir, listenFile), b, true); err != nil { // whole or not at all
		n.log.Warn("cannot remember the listen addresses; the next start takes new ports", "err", err)
	}
}
