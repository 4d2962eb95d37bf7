package registryapi

import (
	"context"
	"fmt"
)

// propose hands cmd to the canonical log and returns what applying it
// produced.
func (a *API) propose(ctx context.Context, cmd Command) (Result, error) {
	res, err := a.cfg.Log.Propose(ctx, Kind, cmd.At, cmd)
	if err != nil {
		return Result{}, err
	}
	r, ok := res.(Result)
	if !ok {
		return Result{}, fmt.Errorf("registry: log returned %T, not a Result", res)
	}
	return r, nil
}
