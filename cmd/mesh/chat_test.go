package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"

	"github.com/agentmesh/mesh/identity"
	"github.com/agentmesh/mesh/internal/testkit"
	"github.com/agentmesh/mesh/node"
	"github.com/agentmesh/mesh/wall"
)

func waitOutput(t *testing.T, out *testkit.Buffer, want string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool { return strings.Contains(out.String(), want) },
		"output never showed %q:\n%s", want, out)
}

// chatting runs `mesh chat` with the given arguments; lines written to the
// returned writer are its stdin.
func chatting(t *testing.T, args ...string) (io.WriteCloser, *testkit.Buffer, chan error) {
	t.Helper()
	in, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	out, done := chatFrom(in, args...)
	return w, out, done
}

// chatFrom runs `mesh chat` with the given arguments and stdin.
func chatFrom(in io.Reader, args ...string) (*testkit.Buffer, chan error) {
	out := &testkit.Buffer{}
	cmd := rootCmd()
	cmd.SetArgs(append([]string{"chat"}, args...))
	cmd.SetIn(in)
	cmd.SetOut(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	return out, done
}

// ended waits for a chat to end, failing the test after timeout.
func ended(t *testing.T, done chan error, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("chat did not end within %s", timeout)
		return nil
	}
}

// startChatNode starts a node alone, closed with the test.
func startChatNode(t *testing.T) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.InMemory, cfg.HTTPAddr, cfg.Listen = true, "127.0.0.1:0", []string{"/ip4/127.0.0.1/tcp/0"}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func TestChatCommand(t *testing.T) {
	t.Parallel()
	n := startChatNode(t)
	resp, err := http.Post(n.URL()+"/v1/clusters", "application/json", strings.NewReader(`{"visibility":"public","name":"tea room"}`))
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		ClusterID string `json:"cluster_id"`
		WS        string `json:"ws"`
	}
	json.NewDecoder(resp.Body).Decode(&cl)
	resp.Body.Close()

	// One joins by the ws address the node handed out, one by slug.
	aliceIn, aliceOut, _ := chatting(t, cl.WS, "--agent", "alice")
	waitOutput(t, aliceOut, "* you are alice in "+cl.ClusterID)
	bobIn, bobOut, bobDone := chatting(t, "tea-room", "--agent", "bob", "--node", n.URL())
	waitOutput(t, bobOut, "online: alice, bob")
	waitOutput(t, aliceOut, "* bob is online")

	io.WriteString(aliceIn, "hello everyone\n")
	waitOutput(t, bobOut, "<alice> hello everyone")
	waitOutput(t, aliceOut, "(delivered to 1)")
	io.WriteString(bobIn, "@alice just you\n")
	waitOutput(t, aliceOut, "<bob → alice> just you")
	io.WriteString(bobIn, "@nobody hello?\n")
	waitOutput(t, bobOut, "(delivered to 0)")

	// Mistakes are said, and the session goes on.
	io.WriteString(bobIn, "@alice\n")
	waitOutput(t, bobOut, "! nothing to send to alice: write @alice <text>")
	io.WriteString(bobIn, strings.Repeat("z", 100<<10)+"\n")
	waitOutput(t, bobOut, "over the 65536 byte frame limit: not sent")
	io.WriteString(bobIn, "after the long line\n")
	waitOutput(t, aliceOut, "<bob> after the long line")
	if strings.Contains(aliceOut.String(), "zzz") {
		t.Fatal("the over-long line was sent")
	}

	// End of input leaves the cluster.
	bobIn.Close()
	select {
	case err := <-bobDone:
		if err != nil {
			t.Fatalf("bob's chat ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("chat did not end at end of input")
	}
	waitOutput(t, aliceOut, "* bob went offline")

	// A key proves the did: the others see it verified.
	keyFile := filepath.Join(t.TempDir(), "carol.key")
	key := identity.GenerateKey()
	if err := identity.WriteKey(keyFile, key); err != nil {
		t.Fatal(err)
	}
	_, carolOut, _ := chatting(t, cl.ClusterID, "--agent", "carol", "--node", n.URL(), "--key", keyFile)
	did := identity.DIDFromPublicKey(key.Public().(ed25519.PublicKey))
	waitOutput(t, carolOut, "* you are carol ("+did+", verified) in "+cl.ClusterID)
	_, daveOut, _ := chatting(t, "tea-room", "--agent", "dave", "--node", n.URL(), "--key", keyFile)
	waitOutput(t, daveOut, "* you are dave ("+did+", verified) in "+cl.ClusterID)

	// The node closing the socket ends the chat with an error.
	_, _, aliceDone := chatting(t, cl.WS, "--agent", "alice2")
	waitOutput(t, aliceOut, "* alice2 is online")
	n.Close()
	select {
	case err := <-aliceDone:
		if err == nil || !strings.Contains(err.Error(), "node shutting down") {
			t.Fatalf("chat ended with %v when the node shut down", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("chat did not end when the node shut down")
	}
	n = startChatNode(t)

	// Refusals come back readable.
	_, _, done := chatting(t, "c_nope", "--agent", "x", "--node", n.URL())
	if err := <-done; err == nil || !strings.Contains(err.Error(), "cluster not found") {
		t.Fatalf("unknown cluster: %v", err)
	}
}

// TestChatSaysWhyTheConnectionEnded: a node that hangs up without a
// closed frame (a slow consumer, say) ends the chat with an error that
// says so.
func TestChatSaysWhyTheConnectionEnded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.Write(r.Context(), websocket.MessageText, []byte(`{"kind":"welcome","you":"x","online":["x"]}`))
		c.Close(websocket.StatusPolicyViolation, "slow consumer: send queue full")
	}))
	defer srv.Close()
	_, out, done := chatting(t, "ws"+strings.TrimPrefix(srv.URL, "http"), "--agent", "x")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "1008 slow consumer") {
			t.Fatalf("chat ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("chat did not end")
	}
	if !strings.Contains(out.String(), "* you are x") {
		t.Fatalf("output: %s", out)
	}
}

// slowNode is a wall address whose node greets a socket after delay and
// answers each frame after delay, or never with answer unset.
func slowNode(t *testing.T, delay time.Duration, answer bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		time.Sleep(delay)
		c.Write(r.Context(), websocket.MessageText, []byte(`{"kind":"welcome","you":"x","online":["x"]}`))
		for n := 1; ; n++ {
			if _, _, err := c.Read(r.Context()); err != nil {
				return
			}
			if answer {
				time.Sleep(delay)
				c.Write(r.Context(), websocket.MessageText, []byte(fmt.Sprintf(`{"kind":"ack","to":null,"delivered":%d}`, n)))
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// TestChatPipedInputWaitsForAnswers: at the end of piped input, chat shows
// the welcome and the acks of what it sent before it leaves, however late
// they come within a few seconds.
func TestChatPipedInputWaitsForAnswers(t *testing.T) {
	t.Parallel()
	out, done := chatFrom(strings.NewReader("one\ntwo\n"), slowNode(t, 300*time.Millisecond, true), "--agent", "x")
	if err := ended(t, done, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"* you are x", "(delivered to 1)", "(delivered to 2)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}

	out, done = chatFrom(strings.NewReader(""), slowNode(t, 300*time.Millisecond, true), "--agent", "x")
	if err := ended(t, done, 15*time.Second); err != nil || !strings.Contains(out.String(), "* you are x") {
		t.Fatalf("empty input: %v, output:\n%s", err, out)
	}
}

// TestChatLeavesWhenNoAnswerComes: at the end of piped input, chat leaves
// though the node never answers what it sent (after answerWait).
func TestChatLeavesWhenNoAnswerComes(t *testing.T) {
	t.Parallel()
	testkit.Slow(t, "answerWait, 5 s (TestChatAnswerWaitIsBounded covers the wait in the fast loop)")
	out, done := chatFrom(strings.NewReader("unanswered\n"), slowNode(t, 0, false), "--agent", "x")
	if err := ended(t, done, 15*time.Second); err != nil {
		t.Fatalf("a node that never answers: %v, output:\n%s", err, out)
	}
}

// TestChatAnswerWaitIsBounded: at the end of its input, chat waits for the
// welcome and the answers to what it sent as long as they take, and at
// most answerWait.
func TestChatAnswerWaitIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := newProgress()
		start := time.Now()
		p.wait(context.Background(), 1, answerWait)
		if waited := time.Since(start); waited != answerWait {
			t.Fatalf("with no answer, chat waited %v, want answerWait (%v)", waited, answerWait)
		}
		start = time.Now()
		time.AfterFunc(time.Second, func() { p.note(wall.Frame{Kind: wall.KindWelcome}) })
		time.AfterFunc(2*time.Second, func() { p.note(wall.Frame{Kind: wall.KindAck}) })
		p.wait(context.Background(), 1, answerWait)
		if waited := time.Since(start); waited != 2*time.Second {
			t.Fatalf("with the answers 2 s on, chat waited %v", waited)
		}
	})
}

// TestChatPipedInputOnANode: `echo 'quick hi' | mesh chat` prints the
// welcome and the ack, and the message reaches the others.
func TestChatPipedInputOnANode(t *testing.T) {
	t.Parallel()
	n := startChatNode(t)
	listenerIn, listener, _ := chatting(t, "lobby", "--agent", "listener", "--node", n.URL())
	defer listenerIn.Close()
	waitOutput(t, listener, "* you are listener")
	out, done := chatFrom(strings.NewReader("quick hi\n"), "lobby", "--agent", "you", "--node", n.URL())
	if err := ended(t, done, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"* you are you in c_lobby", "(delivered to 1)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	waitOutput(t, listener, "<you> quick hi")
}

// TestChatURL: the ws address's query holds unless a flag given on the
// command line overrides it; defaults (environment) fill in the rest; a
// handle is required from one or the other.
func TestChatURL(t *testing.T) {
	t.Parallel()
	const base = "ws://127.0.0.1:7777/v1/clusters/c_x/ws"
	v := func(kv ...string) url.Values {
		out := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		arg             string
		given, defaults url.Values
		want            string // the query; empty: an error
	}{
		{"the address's agent", base + "?agent=bob", nil, nil, "agent=bob"},
		{"a flag overrides it", base + "?agent=bob", v("agent", "alice"), nil, "agent=alice"},
		{"a default does not", base + "?agent=bob&token=ck_1", nil, v("agent", "env", "token", "ck_env"), "agent=bob&token=ck_1"},
		{"a default fills in", base + "?vis=public&agent=", nil, v("agent", "env"), "agent=env&vis=public"},
		{"an empty flag takes it out", base + "?agent=bob&token=ck_1", v("token", ""), nil, "agent=bob"},
		{"no handle anywhere", base + "?vis=public&agent=", nil, nil, ""},
		{"an empty --agent", base + "?agent=bob", v("agent", ""), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chatURL(tc.arg, "", tc.given, tc.defaults)
			switch {
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), "--agent")):
				t.Fatalf("got %q, %v; want an error naming --agent", got, err)
			case tc.want != "" && (err != nil || got != base+"?"+tc.want):
				t.Fatalf("got %q, %v; want %s?%s", got, err, base, tc.want)
			}
		})
	}
}

// TestChatAgentFromTheAddress: `mesh chat <ws-url>` needs no --agent when
// the address names one.
func TestChatAgentFromTheAddress(t *testing.T) {
	t.Parallel()
	n := startChatNode(t)
	ws := "ws" + strings.TrimPrefix(n.URL(), "http") + "/v1/clusters/c_lobby/ws?agent=bob"
	in, out, _ := chatting(t, ws)
	defer in.Close()
	waitOutput(t, out, "* you are bob in c_lobby")
}

// TestChatShowsBoards: a board frame, a message's resolved hashtags and a
// cluster_updated frame are shown to the person chatting.
func TestChatShowsBoards(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    wall.Frame
		want string
	}{
		{wall.Frame{Kind: wall.KindBoard, Event: "post_created", Board: "market", Slug: "market", Post: "p_x", Title: "Bike"}, "* #market: post created p_x Bike"},
		{wall.Frame{Kind: wall.KindBoard, Event: "board_deleted", Board: "market", Slug: "market"}, "* #market: board deleted"},
		{wall.Frame{Kind: wall.KindMessage, From: "a", Payload: []byte(`"see #market"`), Board: "market", Ref: "p_x"}, "<a> see #market (board #market, post p_x)"},
		{wall.Frame{Kind: wall.KindClusterUpdated, Changed: []string{"name"}, Name: new("Day Market"), Slug: "day-market", Visibility: "public"},
			`* cluster renamed to "Day Market", slug day-market`},
		{wall.Frame{Kind: wall.KindClusterUpdated, Changed: []string{"visibility"}, Visibility: "private"}, "* cluster now private"},
	} {
		if got := formatFrame(tc.f, "me"); !strings.HasSuffix(got, tc.want) {
			t.Errorf("%+v: %q, want it to end in %q", tc.f, got, tc.want)
		}
	}
}
