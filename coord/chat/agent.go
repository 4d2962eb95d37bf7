package chat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentmesh/mesh/coord/tailbuf"
)

// maxLine is the longest output line kept whole; longer ones are cut.
const maxLine = 64 << 10

// reportTail is how much of the end of the agent's stdout and stderr is
// read for why it failed.
const reportTail = 4 << 10

// outcome is the end of one attempt of a turn.
type outcome struct {
	text      string
	truncated bool
	anchors   []anchorOp
	class     string // empty: the attempt succeeded
	transient bool
	exit      int    // the exit status of a failed attempt; -1 when it has none
	detail    string // the end of stderr (else the report on stdout), for the timeline
}

type anchorOp struct {
	a     Anchor
	clear bool
}

// attempt runs the agent once for it, streaming its visible lines as
// conv.stream.delta events. The timeout is armed before the agent starts
// so that a test clock cannot pass it unseen.
func (e *Engine) attempt(ctx context.Context, c *conv, it Item, stream string, n int) outcome {
	timeout := e.cfg.Clock.After(e.cfg.TurnTimeout)
	out := &lineWriter{max: e.cfg.MaxOutput, line: func(text string) {
		e.cfg.Emit("conv.stream.delta", map[string]any{"conv": c.st.ID, "stream_id": stream, "attempt": n, "text": text})
	}}
	errs, outTail := tailbuf.New(reportTail), tailbuf.New(reportTail)
	cmd := exec.Command("/bin/sh", "-c", e.cfg.AgentCmd)
	cmd.Dir = e.cfg.Project
	cmd.Env = append(e.cfg.Env(), "MESH_COORD_CONV="+c.st.ID, "MESH_COORD_ATTEMPT="+strconv.Itoa(n),
		"MESH_COORD_AGENT_ID="+it.AgentID, "MESH_COORD_RUN_ID="+it.RunID,
		"MESH_COORD_ATTACHMENTS="+strings.Join(attachmentPaths(c, it), "\n"))
	cmd.Stdin = strings.NewReader(it.Text)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(out, outTail), errs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	res := outcome{exit: -1}
	if err := cmd.Start(); err != nil {
		res.class, res.detail = ClassAgent, err.Error()
		return res
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-timeout:
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = errTimeout
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return outcome{class: ClassAgent, exit: -1}
	}
	out.flush()
	res.text, res.truncated, res.anchors = out.result()
	stderr, _ := errs.String()
	stdout, _ := outTail.String()
	res.detail = strings.TrimSpace(stderr)
	var ee *exec.ExitError
	switch {
	case errors.Is(err, errTimeout):
		res.class = ClassTimeout
	case err != nil:
		if errors.As(err, &ee) {
			res.exit = ee.ExitCode()
		}
		// Of stdout, the answer's channel, only a report is kept.
		var line string
		res.class, line = diagnose(stdout, stderr)
		res.transient = transient[res.class]
		if res.detail == "" {
			res.detail = line
		}
	}
	return res
}

var errTimeout = errors.New("turn timeout")

func attachmentPaths(c *conv, it Item) []string {
	paths := make([]string, len(it.Attachments))
	for i, a := range it.Attachments {
		paths[i] = filepath.Join(c.dir, uploadsDir, a)
	}
	return paths
}

// lineWriter splits the agent's stdout into lines: anchor lines are taken
// out, the others are streamed and kept, up to max bytes.
type lineWriter struct {
	max       int
	line      func(string)
	mu        sync.Mutex
	partial   []byte
	text      strings.Builder
	truncated bool
	anchors   []anchorOp
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 && len(w.partial) < maxLine {
			return len(p), nil
		}
		if i < 0 {
			i = maxLine - 1
		}
		w.take(string(w.partial[:i+1]))
		w.partial = w.partial[i+1:]
	}
}

// take handles one line, with its newline.
func (w *lineWriter) take(line string) {
	line = strings.ToValidUTF8(line, "\uFFFD")
	if a, clear, ok := anchorLine(line); ok {
		w.anchors = append(w.anchors, anchorOp{a: a, clear: clear})
		return
	}
	if w.text.Len()+len(line) > w.max {
		w.truncated = true
		return
	}
	w.text.WriteString(line)
	w.line(line)
}

// flush takes a last line without a newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.take(string(w.partial))
		w.partial = nil
	}
}

func (w *lineWriter) result() (string, bool, []anchorOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String(), w.truncated, w.anchors
}
