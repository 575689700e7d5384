package cdi

// scratchDir is the scratch policy of a pod: scratch space is CDI's scratch
// volume and nothing else. The engine's own fallback, the system temp dir,
// would be the container's writable layer, small and shared with the
// node's other pods, so it is never used here; an image that needs scratch
// space when the controller mounted none fails with
// errdefs.ErrScratchSpaceRequired (Classify: ScratchSpaceRequired).
func scratchDir(paths Paths) string {
	return paths.Scratch
}
