//go:build tools

// Package tools pins the Kubernetes components the e2e cluster runs. It is
// its own module so the library's go.mod never sees k8s.io/kubernetes;
// scripts/e2e/build.sh builds the commands listed here.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
