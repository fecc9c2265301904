//go:build tools

// Package tools pins promtool (Prometheus), whose `promtool test rules` checks the chart's
// alerting rules; the dashboard linter of this module uses the same Prometheus parser.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
