package streamdecode

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInflateWorkersFollowGOMAXPROCS: by default as many clusters or
// grains are inflated at once as Go may run goroutines, GOMAXPROCS, which
// Go sets from the cgroup's CPU limit (CFS quota or cpu.max), not the
// node's cores.
func TestInflateWorkersFollowGOMAXPROCS(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(was)
	for _, procs := range []int{1, 3} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, procs, Options{}.withDefaults().Workers)
	}
	require.Equal(t, 5, Options{Workers: 5}.withDefaults().Workers, "a count asked for is kept")
}
