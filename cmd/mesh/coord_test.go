package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/mesh/coord"
	"github.com/agentmesh/mesh/identity"
)

// TestCoordFlags: mesh coord's settings come from the flags, else from the
// environment, else the defaults; a malformed value names where it came
// from.
func TestCoordFlags(t *testing.T) { // not parallel: it sets the environment
	releasePub := identity.GenerateKey().Public().(ed25519.PublicKey)
	releaseKey := identity.EncodePublicKey(releasePub)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want func(coord.Config) bool
		err  string
	}{
		{name: "defaults", want: func(c coord.Config) bool {
			return c.Dir == "." && c.Port == 0 && c.Poll == 1500*time.Millisecond && c.SendTimeout == 5*time.Second && c.DeviceID != "" &&
				strings.Join(c.AgentEnv, " ") == "default"
		}},
		{name: "flags", args: []string{"--dir", "/p", "--port", "5575", "--registry", "/r.json", "--device-id", "box", "--poll", "3s"},
			want: func(c coord.Config) bool {
				return c.Dir == "/p" && c.Port == 5575 && c.Registry == "/r.json" && c.DeviceID == "box" && c.Poll == 3*time.Second
			}},
		{name: "env", env: map[string]string{"MESH_COORD_DIR": "/e", "MESH_COORD_PORT": "5580", "MESH_COORD_REGISTRY": "/er.json", "MESH_DEVICE_ID": "envbox", "MESH_COORD_HEARTBEAT": "1m"},
			want: func(c coord.Config) bool {
				return c.Dir == "/e" && c.Port == 5580 && c.Registry == "/er.json" && c.DeviceID == "envbox" && c.Heartbeat == time.Minute
			}},
		{name: "part 2 settings", env: map[string]string{"MESH_COORD_AGENT_CMD": "my-agent --print", "MESH_COORD_TURN_TIMEOUT": "2m",
			"MESH_COORD_ARCHIVE_AFTER": "48h", "MESH_COORD_UPDATE_MAX_BYTES": "1000", "MESH_COORD_RUNS_MAX": "3"},
			args: []string{"--site-url", "https://site", "--turn-retries", "4"},
			want: func(c coord.Config) bool {
				return c.Chat.AgentCmd == "my-agent --print" && c.Chat.TurnTimeout == 2*time.Minute && c.Chat.MaxRetries == 4 &&
					c.ArchiveAfter == 48*time.Hour && c.UpdateMaxBytes == 1000 && c.RunsMax == 3 && c.SiteURL == "https://site" &&
					c.Chat.QueueMax == 32 && c.InstructionsWatch == 3*time.Second
			}},
		{name: "guard settings", env: map[string]string{"MESH_COORD_ALLOW_HOST": "coord.test,*.dev.test", "MESH_COORD_REQUIRE_TOKEN": "true",
			"MESH_COORD_INSECURE_SITE": "1", "MESH_COORD_RELEASE_KEY": releaseKey}, args: []string{"--site-url", "http://127.0.0.1:9"},
			want: func(c coord.Config) bool {
				return strings.Join(c.AllowedHosts, " ") == "coord.test *.dev.test" && c.RequireToken && c.InsecureSite &&
					identity.EncodePublicKey(c.ReleaseKey) == releaseKey
			}},
		{name: "release key as did:key", args: []string{"--release-key", identity.DIDFromPublicKey(releasePub), "--allow-host", "a.test"},
			want: func(c coord.Config) bool {
				return c.ReleaseKey.Equal(releasePub) && c.AllowedHosts[0] == "a.test" && !c.RequireToken
			}},
		{name: "bad release key", args: []string{"--release-key", "c2hvcnQ="}, err: "--release-key"},
		{name: "http site", args: []string{"--site-url", "http://127.0.0.1:9"}, err: "insecure-site"},
		{name: "http site elsewhere", args: []string{"--site-url", "http://site", "--insecure-site"}, err: "site URL"},
		{name: "bad host pattern", args: []string{"--allow-host", "[x"}, err: "[x"},
		{name: "bad insecure-site env", env: map[string]string{"MESH_COORD_INSECURE_SITE": "maybe"}, err: "MESH_COORD_INSECURE_SITE"},
		{name: "flag over env", env: map[string]string{"MESH_COORD_PORT": "5580"}, args: []string{"--port", "5581"},
			want: func(c coord.Config) bool { return c.Port == 5581 }},
		{name: "agent pause", env: map[string]string{"MESH_COORD_AGENT_PAUSE": "90s"}, args: []string{"--agent-pause-after", "5"},
			want: func(c coord.Config) bool { return c.Chat.PauseFor == 90*time.Second && c.Chat.PauseAfter == 5 }},
		{name: "agent env", env: map[string]string{"MESH_COORD_AGENT_ENV": "default,DATABASE_URL"},
			want: func(c coord.Config) bool { return strings.Join(c.AgentEnv, " ") == "default DATABASE_URL" }},
		{name: "agent env flag", args: []string{"--agent-env", "PATH", "--agent-env", "AWS_*"},
			want: func(c coord.Config) bool { return strings.Join(c.AgentEnv, " ") == "PATH AWS_*" }},
		{name: "bad agent env", args: []string{"--agent-env", "A-B"}, err: "--agent-env"},
		{name: "bad env", env: map[string]string{"MESH_COORD_PORT": "high"}, err: "MESH_COORD_PORT"},
		{name: "bad flag", args: []string{"--poll", "often"}, err: "poll"},
		{name: "bad port", args: []string{"--port", "70000"}, err: "port 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got coord.Config
			c := newCoordCmd(func(_ context.Context, cfg coord.Config) error {
				got = cfg
				return cfg.Validate()
			})
			c.SetArgs(tc.args)
			c.SetOut(io.Discard)
			c.SetErr(io.Discard)
			err := c.Execute()
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case !tc.want(got):
				t.Fatalf("config %+v", got)
			}
		})
	}
}

// TestCoordBannerNamesTheToken: mesh coord says where the token is; what
// that file holds is what a dashboard's write sends.
func TestCoordBannerNamesTheToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte("id: banner\n"), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := coord.DefaultConfig()
	cfg.Dir, cfg.Listener, cfg.Registry = dir, ln, filepath.Join(t.TempDir(), "ports.json")
	d, err := coord.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var out strings.Builder
	coordBanner(&out, d, dir)
	m := regexp.MustCompile(`(?m)^  token (\S+) \(a dashboard's writes send it: Authorization: Bearer <token>\)$`).FindStringSubmatch(out.String())
	if m == nil || m[1] != filepath.Join(dir, ".coord", "token") {
		t.Fatalf("banner:\n%s", out.String())
	}
	tok, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, bearer := range []string{"", strings.TrimSpace(string(tok))} {
		req, _ := http.NewRequest("POST", d.URL()+"/debug/log", strings.NewReader(`{"msg":"from the dashboard"}`))
		req.Header.Set("Origin", "http://localhost:3000")
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if want := map[bool]int{true: 202, false: 403}[bearer != ""]; res.StatusCode != want {
			t.Fatalf("a dashboard's write with token %q: %d, want %d", bearer, res.StatusCode, want)
		}
	}
}
