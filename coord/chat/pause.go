package chat

import (
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// instance is the instance number that ends an agent id: claude-1, codex_2.
var instance = regexp.MustCompile(`[-_]?[0-9]+$`)

// AgentType is the type of agent a turn runs: its agent id without a
// trailing instance number, in lower case (claude-1 and claude-2 are
// claude), or, for a message without an agent id, the program of the
// agent command (claude for "claude -p").
func (e *Engine) AgentType(agentID string) string {
	if agentID == "" {
		return e.cmdType
	}
	if t := instance.ReplaceAllString(agentID, ""); t != "" {
		return strings.ToLower(t)
	}
	return strings.ToLower(agentID)
}

// commandType is the program an agent command runs: its first word that
// is not a variable assignment, without its folder.
func commandType(cmd string) string {
	for _, w := range strings.Fields(cmd) {
		if !strings.Contains(w, "=") {
			return strings.ToLower(filepath.Base(w))
		}
	}
	return "agent"
}

// noteAttempt counts the rate-limited attempts of an agent type in a row;
// at PauseAfter of them the type is paused for PauseFor: its queued turns
// wait, and a turn under way is not retried. Called with e.mu held.
func (e *Engine) noteAttempt(typ, class string) {
	if class != ClassRateLimited {
		delete(e.rateHits, typ)
		return
	}
	if e.rateHits[typ]++; e.rateHits[typ] < e.cfg.PauseAfter {
		return
	}
	delete(e.rateHits, typ)
	if _, ok := e.paused[typ]; ok {
		return
	}
	until := e.cfg.Clock.Now().Add(e.cfg.PauseFor).UTC()
	e.paused[typ] = until
	e.cfg.Logger.Warn("chat: agent type paused after repeated rate limits", "agent_type", typ, "until", until)
	e.cfg.Emit("agent_type.paused", map[string]any{"agent_type": typ, "resumes_at": until, "class": class})
	timer := e.cfg.Clock.After(e.cfg.PauseFor)
	e.wg.Go(func() {
		select {
		case <-timer:
			e.resume(typ)
		case <-e.ctx.Done():
		}
	})
}

// resume ends the pause of typ and starts the conversations whose next
// message waited for it.
func (e *Engine) resume(typ string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.paused, typ)
	e.cfg.Emit("agent_type.resumed", map[string]any{"agent_type": typ})
	for _, c := range e.convs {
		if c.st.Live != nil || len(c.st.Queue) == 0 || e.AgentType(c.st.Queue[0].AgentID) != typ {
			continue
		}
		if err := e.sendNext(c, false); err != nil {
			e.cfg.Logger.Error("chat: cannot start a turn after a pause", "conv", c.st.ID, "err", err)
		}
	}
}

// pausedUntil is when the pause of the type of agentID ends, or zero.
// Called with e.mu held.
func (e *Engine) pausedUntil(agentID string) time.Time {
	return e.paused[e.AgentType(agentID)]
}

// Paused lists the agent types paused, by name, with when each resumes.
func (e *Engine) Paused() ([]string, map[string]time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.paused))
	until := make(map[string]time.Time, len(e.paused))
	for t, u := range e.paused {
		names = append(names, t)
		until[t] = u
	}
	sort.Strings(names)
	return names, until
}
