package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
)

// quorumCmd is `mesh quorum`: the members of the Raft quorum that runs the
// directory, through a node's admin API.
func quorumCmd() *cobra.Command {
	var nodeURL, keyFile string
	var asJSON bool
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
	f.BoolVar(&asJSON, "json", false, "print the node's answer as JSON rather than a table")
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
		if !asJSON {
			var v quorumView
			if err := json.Unmarshal(out, &v); err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
			printQuorum(cmd.OutOrStdout(), v, time.Now())
			return nil
		}
		var v any
		if json.Unmarshal(out, &v) == nil {
			out, _ = json.MarshalIndent(v, "", "  ")
		}
		fmt.Fprintln(cmd.OutOrStdout(), string(out))
		return nil
	}
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "Print the members: peer id, role, whether each answers, its URL and address", Args: cobra.NoArgs,
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

// quorumView is what a node's admin API says of the quorum
// (GET /v1/admin/quorum).
type quorumView struct {
	Leader      string `json:"leader"`
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit_index"`
	URL         string `json:"url"`
	Members     []struct {
		PeerID      string     `json:"peer_id"`
		Voter       bool       `json:"voter"`
		Leader      bool       `json:"leader"`
		Addrs       []string   `json:"addrs"`
		URL         string     `json:"url"`
		Reachable   bool       `json:"reachable"`
		LastContact *time.Time `json:"last_contact"`
	} `json:"members"`
}

// printQuorum writes v as a table: a line for the quorum, one per member.
func printQuorum(w io.Writer, v quorumView, now time.Time) {
	leader := v.Leader
	if leader == "" {
		leader = "none (an election is under way, or no majority is up)"
	}
	fmt.Fprintf(w, "leader %s, term %d, commit index %d (as %s sees it)\n", leader, v.Term, v.CommitIndex, v.URL)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER ID\tROLE\tREACHABLE\tLAST CONTACT\tURL\tADDRESS")
	for _, m := range v.Members {
		role := "nonvoter"
		switch {
		case m.Leader:
			role = "leader"
		case m.Voter:
			role = "voter"
		}
		reachable, last, url, addr := "no", "never", "-", "-"
		if m.Reachable {
			reachable = "yes"
		}
		if m.LastContact != nil {
			last = max(0, now.Sub(*m.LastContact)).Round(100*time.Millisecond).String() + " ago"
		}
		if m.URL != "" {
			url = m.URL
		}
		if i := slices.IndexFunc(m.Addrs, func(a string) bool { return !strings.Contains(a, "/p2p-circuit") }); i >= 0 {
			addr = m.Addrs[i]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.PeerID, role, reachable, last, url, addr)
	}
	tw.Flush()
}
