package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/wall"
)

func chatCmd() *cobra.Command {
	var nodeURL, agent, token, vis, did, keyFile string
	c := &cobra.Command{
		Use:   "chat <ws-url | cluster id | slug>",
		Short: "Chat in a cluster from the terminal",
		Long: `Connects to a cluster's wall and sends each line typed on stdin:

  some text          to everyone
  @bob some text     to bob only
  @bob,carol text    to bob and carol

Frames are printed as they arrive. Ctrl-D (end of input) leaves, once the
welcome and the acks of what was sent have come (5 s at most), so that
piped input (echo hi | mesh chat ...) shows them too.
The cluster is a ws:// address (as POST /v1/clusters returns it), or a
cluster id or public slug on --node. What the address's query says
(agent=, token=, vis=, did=) holds unless the matching flag is given on
the command line, which overrides it; environment variables only fill in
what the address leaves out. With --key, the connect is signed with that
key (mesh keygen), proving your did:key: the others see did_verified.`,
		Args:    cobra.ExactArgs(1),
		PreRunE: applyEnvHook,
		RunE: func(cmd *cobra.Command, args []string) error {
			given, defaults := url.Values{}, url.Values{}
			for k, v := range map[string]string{"agent": agent, "token": token, "vis": vis, "did": did} {
				switch {
				case cmd.Flags().Changed(k):
					given.Set(k, v)
				case v != "":
					defaults.Set(k, v)
				}
			}
			u, err := chatURL(args[0], nodeURL, given, defaults)
			if err == nil && keyFile != "" {
				u, err = signedURL(cmd.Context(), u, keyFile)
			}
			if err != nil {
				return err
			}
			return runChat(cmd.Context(), u, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&agent, "agent", "", "your handle in the cluster; required unless the ws address has agent=<handle>")
	f.StringVar(&nodeURL, "node", "http://127.0.0.1:7777", "node to connect through, for a cluster id or slug")
	f.StringVar(&token, "token", "", "cluster token (ck_) or admin token (ak_); private clusters need one")
	f.StringVar(&vis, "vis", "", "your visibility: public (default), private or ghost")
	f.StringVar(&did, "did", "", "a did:key shown to the others (not verified unless --key proves it)")
	f.StringVar(&keyFile, "key", "", "sign the connect with this key file, proving your did:key")
	declareEnv(f, map[string]string{"agent": "MESH_AGENT", "node": "MESH_NODE", "token": "MESH_CLUSTER_TOKEN"})
	return c
}

// chatURL turns the argument into a wall address: its query with given
// set (an empty value takes the key out), and defaults where it has no
// value. It fails when no handle is left.
func chatURL(arg, nodeURL string, given, defaults url.Values) (string, error) {
	if !strings.HasPrefix(arg, "ws://") && !strings.HasPrefix(arg, "wss://") {
		node, err := url.Parse(strings.TrimRight(nodeURL, "/"))
		if err != nil || (node.Scheme != "http" && node.Scheme != "https") {
			return "", fmt.Errorf("--node %q: want an http:// or https:// address", nodeURL)
		}
		node.Scheme = map[string]string{"http": "ws", "https": "wss"}[node.Scheme]
		arg = node.String() + "/v1/clusters/" + url.PathEscape(arg) + "/ws" // an id or a slug
	}
	u, err := url.Parse(arg)
	if err != nil {
		return "", fmt.Errorf("cluster address %q: %w", arg, err)
	}
	q := u.Query()
	for k := range defaults {
		if q.Get(k) == "" {
			q.Set(k, defaults.Get(k))
		}
	}
	for k := range given {
		if v := given.Get(k); v != "" {
			q.Set(k, v)
		} else {
			q.Del(k)
		}
	}
	if q.Get("agent") == "" {
		return "", errors.New("say who you are: --agent <handle>, or agent=<handle> in the ws address")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// signedURL adds to wall address u the proof of the key in keyFile
// (wall.SignedURL).
func signedURL(ctx context.Context, u, keyFile string) (string, error) {
	key, err := identity.LoadKey(keyFile)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return wall.SignedURL(ctx, u, key)
}

// answerWait bounds how long chat waits, at the end of its input, for the
// welcome and the answers to what it sent (acks wait up to 2 s for other
// nodes).
const answerWait = 5 * time.Second

func runChat(ctx context.Context, wsURL string, in io.Reader, out io.Writer) error {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	c, err := wall.Dial(dctx, wsURL)
	cancel()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var leaving atomic.Bool // we hung up: the connection's end is no news
	prog := newProgress()
	done := make(chan error, 1)
	go func() {
		defer stop()
		done <- printFrames(ctx, c, out, &leaving, prog)
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		readLines(ctx, in, lines, func(n int) {
			fmt.Fprintf(out, "! a line of %d bytes or more is over the %d byte frame limit: not sent\n", n, wall.MaxFrame)
		})
	}()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return <-done
		case line, ok := <-lines:
			if !ok {
				// Piped input ends at once: what the node answers is
				// still worth seeing.
				prog.wait(ctx, sent, answerWait)
				leaving.Store(true)
				c.Close()
				return <-done
			}
			to, text := parseLine(line)
			switch {
			case text == "" && to != nil:
				fmt.Fprintf(out, "! nothing to send to %s: write @%s <text>\n", strings.Join(to, ","), strings.Join(to, ","))
			case text != "":
				if err := c.Send(ctx, text, to...); err != nil {
					return <-done
				}
				sent++
			}
		}
	}
}

// progress is what the node has answered, as printFrames saw it.
type progress struct {
	welcomed atomic.Bool
	answers  atomic.Int64  // acks and error frames: one for each frame sent
	changed  chan struct{} // capacity 1: a signal that the above changed
}

func newProgress() *progress { return &progress{changed: make(chan struct{}, 1)} }

// note counts frame f, printed already.
func (p *progress) note(f wall.Frame) {
	switch f.Kind {
	case wall.KindWelcome:
		p.welcomed.Store(true)
	case wall.KindAck, wall.KindError:
		p.answers.Add(1)
	default:
		return
	}
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// wait waits until the welcome and the answers to sent frames came, ctx
// ends, or d passes.
func (p *progress) wait(ctx context.Context, sent int, d time.Duration) {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for !p.welcomed.Load() || p.answers.Load() < int64(sent) {
		select {
		case <-p.changed:
		case <-ctx.Done():
			return
		case <-timeout.C:
			return
		}
	}
}

// printFrames prints what the node sends until the connection ends, and
// says why it ended: nil when we hung up (leaving), else an error. prog
// learns of each frame once it is printed.
func printFrames(ctx context.Context, c *wall.Client, out io.Writer, leaving *atomic.Bool, prog *progress) error {
	me := ""
	for {
		f, err := c.Next(ctx)
		var ce websocket.CloseError
		switch {
		case err == nil:
		case leaving.Load() || ctx.Err() != nil:
			return nil
		case errors.As(err, &ce):
			return fmt.Errorf("the node closed the connection: %d %s", ce.Code, ce.Reason)
		default:
			return fmt.Errorf("lost the connection to the node: %w", err)
		}
		if f.Kind == wall.KindWelcome {
			me = f.You
		}
		fmt.Fprintln(out, formatFrame(f, me))
		prog.note(f)
		if f.Kind == wall.KindClosed {
			return fmt.Errorf("the node closed the socket: %s", f.Reason)
		}
	}
}

// readLines sends the lines of in to lines until in ends or ctx does. A
// line longer than a frame may be is skipped and reported to tooLong.
func readLines(ctx context.Context, in io.Reader, lines chan<- string, tooLong func(n int)) {
	br := bufio.NewReaderSize(in, 64<<10)
	var line []byte
	over := false // the line so far is over the limit: skip the rest of it
	for {
		chunk, more, err := br.ReadLine()
		if err != nil {
			return
		}
		if !over {
			line = append(line, chunk...)
			if over = len(line) > wall.MaxFrame; over {
				tooLong(len(line))
			}
		}
		if more {
			continue
		}
		text, skip := string(line), over
		line, over = line[:0], false
		if skip {
			continue
		}
		select {
		case lines <- text:
		case <-ctx.Done():
			return
		}
	}
}

// parseLine reads "@bob,carol text" as a direct message, anything else as
// text for everyone.
func parseLine(line string) (to []string, text string) {
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "@"); ok {
		handles, text, _ := strings.Cut(rest, " ")
		return strings.Split(handles, ","), strings.TrimSpace(text)
	}
	return nil, line
}

// tags shows what a message's hashtags resolved to.
func tags(f wall.Frame) string {
	var out []string
	if f.Board != "" {
		out = append(out, "board #"+f.Board)
	}
	if f.Ref != "" {
		out = append(out, "post "+f.Ref)
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, ", ") + ")"
}

// verifiedDID renders a did its holder proved: " (did:key:…, verified)";
// "" for a did only claimed, which anyone may give.
func verifiedDID(did *string, verified bool) string {
	if !verified || did == nil {
		return ""
	}
	return " (" + *did + ", verified)"
}

// formatFrame renders a frame for a person.
func formatFrame(f wall.Frame, me string) string {
	switch f.Kind {
	case wall.KindWelcome:
		role := ""
		if f.Owner {
			role = " (owner)"
		}
		return fmt.Sprintf("* you are %s%s%s in %s; online: %s", f.You, verifiedDID(f.YouDID, f.DIDVerified), role, f.Cluster, strings.Join(f.Online, ", "))
	case wall.KindPresence:
		if f.Status == "online" {
			return fmt.Sprintf("* %s%s is online", f.Agent, verifiedDID(f.DID, f.DIDVerified))
		}
		return fmt.Sprintf("* %s went offline", f.Agent)
	case wall.KindMessage:
		at := time.UnixMilli(f.TS).Format("15:04:05")
		who := f.From
		if len(f.To) > 0 && string(f.To) != "null" {
			who += " → " + me
		}
		return fmt.Sprintf("[%s] <%s> %s", at, who, payloadText(f.Payload)) + tags(f)
	case wall.KindAck:
		return fmt.Sprintf("  (delivered to %d)", f.Delivered)
	case wall.KindBoard:
		return strings.TrimSpace(fmt.Sprintf("* #%s: %s %s %s", f.Slug, strings.ReplaceAll(f.Event, "_", " "), f.Post, f.Title))
	case wall.KindClusterUpdated:
		return clusterUpdate(f)
	case wall.KindClosed:
		return "* closed: " + f.Reason
	case wall.KindError:
		return "! " + f.Detail
	}
	return fmt.Sprintf("? %s frame", f.Kind)
}

// clusterUpdate renders a cluster_updated frame: what changed, as it
// stands now.
func clusterUpdate(f wall.Frame) string {
	var out []string
	if slices.Contains(f.Changed, "name") {
		name := "a name this node cannot read"
		if f.Name != nil {
			name = strconv.Quote(*f.Name)
		}
		out = append(out, "renamed to "+name)
	}
	if slices.Contains(f.Changed, "visibility") {
		out = append(out, "now "+f.Visibility)
	}
	if f.Slug != "" {
		out = append(out, "slug "+f.Slug)
	}
	return "* cluster " + strings.Join(out, ", ")
}

// payloadText shows a text payload as text, anything else as JSON.
func payloadText(p json.RawMessage) string {
	var s string
	if json.Unmarshal(p, &s) == nil {
		return s
	}
	var obj struct{ Text string }
	if json.Unmarshal(p, &obj) == nil && obj.Text != "" {
		return obj.Text
	}
	return string(p)
}
