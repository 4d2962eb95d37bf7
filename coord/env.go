package coord

import (
	"os"

	"github.com/agentmesh/mesh/coord/agentenv"
	"github.com/agentmesh/mesh/coord/cluster"
)

// environ is the environment of agent turns and crons: the variables of
// the daemon's environment --agent-env allows (never its MESH_* ones),
// then cluster.yaml's env.
func (d *Daemon) environ() []string {
	var set map[string]string
	if st := d.current(); st != nil {
		set = st.cluster.Env
	}
	return d.env.Environ(os.Environ(), set)
}

// setSecrets tells the debug log the values it blanks out: those of the
// secret variables of the daemon's environment, of cluster.yaml's env and
// of the crons' env, and the daemon's token.
func (d *Daemon) setSecrets(c cluster.Cluster) {
	sets := []map[string]string{c.Env, {"TOKEN": d.token}}
	for _, j := range c.Crons {
		sets = append(sets, j.Env)
	}
	d.dlog.SetSecrets(agentenv.Secrets(os.Environ(), sets...))
}
