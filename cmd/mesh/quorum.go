package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
)

// quorumCmd is `mesh quorum`: the members of the Raft quorum that runs the
// directory, through a node's admin API.
func quorumCmd() *cobra.Command {
	var nodeURL, keyFile string
	c := &cobra.Command{
		Use:   "quorum",
		Short: "List, add or remove the bootstrap nodes of the directory's Raft quorum",
		Long: `List, add or remove the bootstrap nodes of the directory's Raft quorum, through
any node's admin API (the change is forwarded to the leader; a new member installs
the directory before the change commits, so give the leader's URL, or a node with a
long enough --forward-timeout). Adding and removing take a Mesh-Sig by the key of a
member (its node.key). Start a new member first, with --role bootstrap and --quorum
listing the current members (not itself): it waits to be added.`,
	}
	f := c.PersistentFlags()
	f.StringVar(&nodeURL, "node", "http://127.0.0.1:7777", "node whose admin API to use")
	f.StringVarP(&keyFile, "key", "k", "node.key", "a member's node.key, which signs add and remove")
	declareEnv(f, map[string]string{"node": "MESH_NODE", "key": "MESH_KEY"})
	c.PersistentPreRunE = applyEnvHook
	send := func(cmd *cobra.Command, method, path string, body []byte) error {
		req, err := http.NewRequest(method, strings.TrimRight(nodeURL, "/")+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if method != http.MethodGet {
			key, err := identity.LoadKey(keyFile)
			if err != nil {
				return err
			}
			identity.SignRequest(req, key, body, time.Now())
		}
		resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(out))
		}
		var v any
		if json.Unmarshal(out, &v) == nil {
			out, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintln(cmd.OutOrStdout(), string(out))
		return nil
	}
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "Print the leader, term, commit index and members", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return send(cmd, http.MethodGet, "/v1/admin/quorum", nil) },
	}, &cobra.Command{
		Use: "add MULTIADDR", Short: "Add a bootstrap node (its full multiaddr, …/p2p/<peer id>) as a voter", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, _ := json.Marshal(map[string]string{"addr": args[0]})
			return send(cmd, http.MethodPost, "/v1/admin/quorum/members", body)
		},
	}, &cobra.Command{
		Use: "remove PEER_ID", Short: "Remove a member from the quorum", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, http.MethodDelete, "/v1/admin/quorum/members/"+args[0], nil)
		},
	})
	return c
}
