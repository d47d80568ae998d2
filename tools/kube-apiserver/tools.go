//go:build tools

// Package tools pins the commands built from this module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
