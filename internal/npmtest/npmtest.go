// Package npmtest gives tests the npm packages of a folder of the
// repository (a committed package.json and package-lock.json), for the
// end-to-end tests that drive a JavaScript program with node. It must not
// be imported outside tests.
package npmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentmesh/mesh/internal/testkit"
)

// Require makes sure node and npm are installed and dir's packages are
// (`npm ci` when node_modules lacks module). Without node and npm the test
// is skipped, unless MESH_REQUIRE_TOOLS=1 (CI), where it fails; under
// -short it is skipped.
func Require(t testing.TB, dir, module string) {
	t.Helper()
	testkit.Slow(t, "npm and node")
	require := os.Getenv("MESH_REQUIRE_TOOLS") == "1"
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if require {
				t.Fatalf("MESH_REQUIRE_TOOLS=1 but %s is not installed", tool)
			}
			t.Skipf("%s is not installed: skipping the end-to-end test with %s (set MESH_REQUIRE_TOOLS=1 to make this a failure)", tool, module)
		}
	}
	installing.Lock() // tests run in parallel: one installs, the others wait and find the packages
	defer installing.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", module)); err != nil {
		out, err := exec.Command("npm", "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("npm ci --prefix %s: %v\n%s", dir, err, out)
		}
	}
}

// installing is held while Require installs packages.
var installing sync.Mutex
