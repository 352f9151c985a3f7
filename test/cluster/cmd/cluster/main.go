// Command cluster brings up a real single-node Kubernetes cluster on this
// machine and tears it down on Ctrl-C (see package test/cluster):
//
//	go run ./test/cluster/cmd/cluster up     # until Ctrl-C; prints KUBECONFIG
//	go run ./test/cluster/cmd/cluster down   # clean up after a crash
//	go run ./test/cluster/cmd/cluster build  # only build the binaries
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/csi-rclone/csi-rclone/test/cluster"
)

func main() {
	workDir := flag.String("workdir", cluster.DefaultWorkDir, "the cluster's scratch dir, removed on the way out")
	cacheDir := flag.String("cache", cluster.DefaultCacheDir(), "where the built binaries are kept between runs")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: cluster [flags] up|down|build")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *workDir, *cacheDir); err != nil {
		log.Fatal(err)
	}
}

func run(cmd, workDir, cacheDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "down":
		return cluster.Down(workDir, log.Printf)
	case "build":
		_, err := cluster.Build(ctx, cacheDir, log.Printf)
		return err
	case "up":
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	bins, err := cluster.Build(ctx, cacheDir, log.Printf)
	if err != nil {
		return err
	}
	if err := cluster.BuildPause(ctx, filepath.Join(cacheDir, "bin")); err != nil {
		return err
	}
	c, err := cluster.Up(ctx, cluster.Options{WorkDir: workDir, Binaries: bins, Logf: log.Printf})
	if err != nil {
		return err
	}
	busybox, err := cluster.BusyboxImage("csi-rclone.test/busybox:1")
	if err == nil {
		err = c.LoadImages(ctx, busybox)
	}
	if err == nil {
		fmt.Printf("export KUBECONFIG=%s\n# kubectl: %s\n# Ctrl-C tears the cluster down.\n", c.Kubeconfig, bins.Kubectl)
		<-ctx.Done()
	}
	log.Printf("tearing down")
	if derr := c.Down(); derr != nil {
		return fmt.Errorf("%v; tear-down: %w", err, derr)
	}
	return err
}
