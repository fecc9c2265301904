//go:build tools

// Package tools pins the weed command (SeaweedFS) this module builds.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
