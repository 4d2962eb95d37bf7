// Package browsertest drives Debian's chromium, headless, for tests of the
// pages the node serves: one browser per test binary, started on first
// use, one tab per test, every wait bounded.
//
// A package using it closes the browser when its tests end:
//
//	func TestMain(m *testing.M) { os.Exit(browsertest.Main(m)) }
//
// Without chromium on PATH a test that asks for a tab is skipped, saying
// so, unless MESH_REQUIRE_TOOLS=1 (CI), where it fails.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentmesh/mesh/internal/testkit"
)

// Chromium is the browser's executable, looked up on PATH (Debian's
// package chromium).
const Chromium = "chromium"

// startTimeout bounds the browser's start.
const startTimeout = 30 * time.Second

// WaitTimeout bounds one wait of Until.
const WaitTimeout = 15 * time.Second

// shared is the test binary's browser.
var shared struct {
	once  sync.Once
	ctx   context.Context // of the browser's first tab, which owns the browser
	close func()
	err   error
}

// Main runs m's tests, then closes the browser if one started. Use it in
// TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.close != nil {
		shared.close()
	}
	return code
}

// Need skips t unless a browser can run: under go test -short, or without
// chromium on PATH (then it fails under MESH_REQUIRE_TOOLS=1). Tab calls
// it; a test calls it first, before it builds what the browser will see.
// It returns the browser's path.
func Need(t testing.TB) string {
	t.Helper()
	testkit.Slow(t, "a browser")
	path, err := exec.LookPath(Chromium)
	if err != nil {
		if os.Getenv("MESH_REQUIRE_TOOLS") == "1" {
			t.Fatalf("MESH_REQUIRE_TOOLS=1 but the browser tests need %s (apt-get install chromium)", Chromium)
		}
		t.Skipf("%s is not installed: skipping the browser test (set MESH_REQUIRE_TOOLS=1 to make this a failure)", Chromium)
	}
	return path
}

// Tab opens a tab of the shared browser for t, closed when t ends; its
// actions fail once timeout has passed. The tab has a browser context of
// its own (no cookie or cache of another test), whose connections close
// with it: a server the test stops does not wait for the browser's idle
// or speculative ones (net/http's Shutdown waits up to 5 s for a
// connection that never sent a request).
func Tab(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	path := Need(t)
	shared.once.Do(func() { start(path) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	tab, closeTab := chromedp.NewContext(shared.ctx, chromedp.WithNewBrowserContext())
	ctx, cancel := context.WithTimeout(tab, timeout)
	t.Cleanup(func() {
		cancel()
		closeTab()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// start starts the browser at path, headless, with no sandbox (tests run
// as root in CI), no GPU and no traffic of its own.
func start(path string) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// The first tab's context owns the browser process: it must not end
	// with a timeout, so the start is bounded here instead.
	browser, cancelBrowser := chromedp.NewContext(alloc)
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(browser) }()
	var err error
	select {
	case err = <-started:
	case <-time.After(startTimeout):
		err = fmt.Errorf("%s did not start within %v", path, startTimeout)
	}
	shared.close = func() {
		cancelBrowser()
		cancelAlloc()
	}
	if err != nil {
		shared.close()
		shared.err = fmt.Errorf("start %s: %w", path, err)
		return
	}
	shared.ctx = browser
}

// Problems collects, from now on, what ctx's tab reports as errors:
// uncaught exceptions, console errors and the browser's own (a script,
// style or socket the Content-Security-Policy refused, a failed load).
// The func it returns lists those so far.
func Problems(ctx context.Context) func() []string {
	var mu sync.Mutex
	var got []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return // the tab closed
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				got = append(got, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// Until polls JavaScript expression expr in ctx's tab until it is true;
// it fails t, naming what, after WaitTimeout or when ctx ends first.
func Until(t testing.TB, ctx context.Context, expr, what string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(WaitTimeout)))
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// loadPause paces the loads of UntilLoaded.
const loadPause = 50 * time.Millisecond

// UntilLoaded loads url in ctx's tab, again and again, until JavaScript
// expression expr is true on the loaded page: the wait for a page without
// script, which changes only when loaded anew. It fails t, naming what,
// after WaitTimeout or when ctx ends first.
func UntilLoaded(t testing.TB, ctx context.Context, url, expr, what string) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		ok, err := false, chromedp.Do(ctx, chromedp.Navigate(url))
		if err == nil {
			ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		}
		if ok && err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waiting for %s on %s (%s): last load: %v", what, url, expr, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(loadPause):
		}
	}
}
