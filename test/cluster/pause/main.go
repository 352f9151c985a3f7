// Command pause is the pod sandbox's process: it holds the pod's namespaces
// until it is told to stop. The cluster's sandbox image is this binary.
package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of a shared PID namespace it also reaps orphans.
	go func() {
		for {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
				time.Sleep(time.Second)
			}
		}
	}()
	<-sig
}
