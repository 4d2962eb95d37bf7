package registryapi

import (
	"context"

	"github.com/agentmesh/mesh/internal/cmdlog"
)

// propose hands cmd to the canonical log and returns what applying it
// produced.
func (a *API) propose(ctx context.Context, cmd Command) (Result, error) {
	return cmdlog.ResultAs[Result](a.cfg.Log.Propose(ctx, Kind, cmd.At, cmd))
}
