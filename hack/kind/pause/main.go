// Command pause is the sandbox process of the kind node image's pods (recall_dev.kind_image).
//
// It holds the pod's namespaces open and does nothing else: it waits for SIGTERM or SIGINT
// and exits 0, and reaps children it inherits when the pod shares one PID namespace.
// It is built statically (CGO_ENABLED=0) and shipped in an image with no other file.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("pause: warning: not PID 1\n")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
