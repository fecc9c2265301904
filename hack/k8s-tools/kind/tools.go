//go:build tools

// Package tools pins kind, which `make e2e-kind` runs (built only by build.sh --with-kind).
package tools

import _ "sigs.k8s.io/kind"
