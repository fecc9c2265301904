//go:build tools

// Package tools pins kube-score, the chart linter `make chart-lint` runs.
package tools

import _ "github.com/zegl/kube-score/cmd/kube-score"
