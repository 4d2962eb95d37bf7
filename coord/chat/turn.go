package chat

import (
	"fmt"
	"time"
)

// turn answers it, retrying transient errors, and records the answer.
func (e *Engine) turn(c *conv, it Item, stream string) {
	defer e.wg.Done()
	var out outcome
	typ := e.AgentType(it.AgentID)
	for n := 0; ; n++ {
		out = e.attempt(e.ctx, c, it, stream, n)
		if e.ctx.Err() != nil {
			return // stopping: the item stays live on disk
		}
		e.mu.Lock()
		e.noteAttempt(typ, out.class)
		paused := !e.paused[typ].IsZero()
		e.mu.Unlock()
		if out.class == "" || !out.transient || n >= e.cfg.MaxRetries || paused {
			break
		}
		wait := time.Duration(Backoff(n+1)) * time.Second
		timer := e.cfg.Clock.After(wait)
		e.cfg.Logger.Info("chat: transient agent error; retrying", "conv", c.st.ID, "class", out.class, "in", wait)
		e.cfg.Emit("conv.stream.retry", map[string]any{"conv": c.st.ID, "stream_id": stream, "attempt": n + 1,
			"error": out.class, "retry_in_secs": wait.Seconds()})
		select {
		case <-timer:
		case <-e.ctx.Done():
			return
		}
	}
	e.finish(c, it, stream, out)
	if e.cfg.TurnEnded != nil {
		e.cfg.TurnEnded(c.st.ID, it, TurnEnd{Class: out.class, Detail: out.detail})
	}
}

// finish records the end of a turn and starts the next queued message.
func (e *Engine) finish(c *conv, it Item, stream string, out outcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := Message{Role: RoleAgent, Text: out.text, StreamID: stream, AgentID: it.AgentID, RunID: it.RunID, Truncated: out.truncated}
	if out.class != "" {
		m = Message{Role: RoleSystem, Text: e.cfg.Redact(failureText(out)), StreamID: stream, AgentID: it.AgentID, RunID: it.RunID, Error: out.class}
	} else {
		e.applyAnchors(c, out.anchors)
	}
	if err := e.record(c, &m); err != nil {
		e.cfg.Logger.Error("chat: cannot record an answer", "conv", c.st.ID, "err", err)
	}
	c.st.LastFinal, c.st.Live = stream, nil
	e.cfg.Emit("conv.stream.final", map[string]any{"conv": c.st.ID, "stream_id": stream, "message_id": m.ID, "error": m.Error})
	var err error
	if len(c.st.Queue) > 0 && e.pausedUntil(c.st.Queue[0].AgentID).IsZero() {
		err = e.sendNext(c, true)
	} else {
		err = c.save()
		e.cfg.Emit("conv.activity", map[string]any{"conv": c.st.ID, "live": false})
	}
	if err != nil {
		e.cfg.Logger.Error("chat: cannot save a conversation", "conv", c.st.ID, "err", err)
	}
}

// failureText is what the timeline says of a failed turn: its class, the
// agent's exit status and the end of its stderr (else of its stdout), to
// be redacted.
func failureText(out outcome) string {
	s := "the agent failed: " + out.class
	if out.exit >= 0 {
		s += fmt.Sprintf(" (exit status %d)", out.exit)
	}
	if d := out.detail; d != "" {
		if len(d) > 1024 {
			d = d[len(d)-1024:]
		}
		s += "\n" + d
	}
	return s
}

// applyAnchors binds or unbinds c as the anchor lines of its answer say;
// an anchor the roadmap does not know is rejected.
func (e *Engine) applyAnchors(c *conv, ops []anchorOp) {
	for _, op := range ops {
		ev := map[string]any{"conv": c.st.ID}
		switch {
		case op.clear:
			c.st.Anchor = nil
			e.cfg.Emit("conv.anchor_cleared", ev)
			continue
		case op.a.Initiative == "":
			ev["reason"] = "no initiative named"
		case e.cfg.CheckAnchor != nil:
			if err := e.cfg.CheckAnchor(op.a); err != nil {
				ev["reason"] = err.Error()
			}
		}
		ev["initiative"], ev["task"] = op.a.Initiative, op.a.Task
		if ev["reason"] != nil {
			e.cfg.Emit("conv.anchor_rejected", ev)
			continue
		}
		a := op.a
		c.st.Anchor = &a
		e.cfg.Emit("conv.anchor_bound", ev)
	}
}
