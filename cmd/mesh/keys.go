package main

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/p2p"
)

func keygenCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "keygen",
		Short: "Write a new Ed25519 identity key file and print its did:key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := identity.GenerateKey()
			if err := identity.WriteKey(out, key); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey)))
			return nil
		},
	}
	c.Flags().StringVarP(&out, "out", "o", "agent.key", "key file to create (never overwritten)")
	return c
}

func pubkeyCmd() *cobra.Command {
	var keyFile string
	var did, peerID bool
	c := &cobra.Command{
		Use:     "pubkey",
		Short:   "Print the base64 public key (or, with --did, the did:key; with --peer-id, the libp2p peer id) of a key file",
		Args:    cobra.NoArgs,
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := identity.LoadKey(keyFile)
			if err != nil {
				return err
			}
			pub := key.Public().(ed25519.PublicKey)
			if peerID {
				id, err := p2p.PeerID(pub)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			}
			if did {
				fmt.Fprintln(cmd.OutOrStdout(), identity.DIDFromPublicKey(pub))
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), identity.EncodePublicKey(pub))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&keyFile, "key", "k", "agent.key", "key file")
	declareEnv(c.Flags(), map[string]string{"key": "MESH_KEY"})
	c.Flags().BoolVar(&did, "did", false, "print the did:key instead")
	c.Flags().BoolVar(&peerID, "peer-id", false, "print the libp2p peer id instead (of a node.key: the /p2p/ part of the node's addresses)")
	return c
}

func signCmd() *cobra.Command {
	var keyFile, dataFile string
	var valueOnly bool
	c := &cobra.Command{
		Use:   "sign METHOD PATH [BODY]",
		Short: "Print a Mesh-Sig header for a request",
		Long: `Print a Mesh-Sig header for a request, ready for curl -H. PATH is the
request path as sent, query string included. BODY must be byte-for-byte the
body curl sends (use --data-raw with curl); --data-file reads it from a file,
"-" for stdin.`,
		Example: `  BODY='{"success":true,"latency_ms":300}'
  curl -X POST http://127.0.0.1:7777/v1/agents/echo/feedback \
    -H "$(mesh sign --key agent.key POST /v1/agents/echo/feedback "$BODY")" --data-raw "$BODY"`,
		Args:    cobra.RangeArgs(2, 3),
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := identity.LoadKey(keyFile)
			if err != nil {
				return err
			}
			body, err := signBody(args, dataFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			v := identity.Sign(key, args[0], args[1], body, time.Now())
			if !valueOnly {
				v = identity.SigHeaderName + ": " + v
			}
			fmt.Fprintln(cmd.OutOrStdout(), v)
			return nil
		},
	}
	c.Flags().StringVarP(&keyFile, "key", "k", "agent.key", "key file")
	declareEnv(c.Flags(), map[string]string{"key": "MESH_KEY"})
	c.Flags().StringVar(&dataFile, "data-file", "", "read the body from this file (- for stdin)")
	c.Flags().BoolVar(&valueOnly, "value", false, "print only the header value")
	return c
}

func signBody(args []string, dataFile string, stdin io.Reader) ([]byte, error) {
	switch {
	case len(args) == 3 && dataFile != "":
		return nil, fmt.Errorf("give the body as an argument or with --data-file, not both")
	case len(args) == 3:
		return []byte(args[2]), nil
	case dataFile == "-":
		return io.ReadAll(stdin)
	case dataFile != "":
		return os.ReadFile(dataFile)
	}
	return nil, nil
}
