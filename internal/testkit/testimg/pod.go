package testimg

import _ "embed"

// PodScript is pod.sh: run as `unshare --mount --propagation private sh -c
// PodScript pod ROOT NDIRS DIR... [POD_PATH HOST_PATH]...`, it runs
// /importer as a pod of CDI's would, with its volumes at their fixed paths.
//
//go:embed pod.sh
var PodScript string
