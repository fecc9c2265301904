//go:build tools

// Package tools pins rancher's local-path-provisioner, the kind node image's default
// StorageClass `standard` (built only by build.sh --with-kind).
package tools

import _ "github.com/rancher/local-path-provisioner"
