// Command render writes the Helm chart rendered with its default values to
// deploy/kubernetes (make manifests), replacing every YAML file there.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/csi-rclone/csi-rclone/deploy"
)

func main() {
	chartDir := flag.String("chart", "deploy/helm/csi-rclone", "the chart")
	outDir := flag.String("out", "deploy/kubernetes", "where the manifests go")
	flag.Parse()
	if err := run(*chartDir, *outDir); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(chartDir, outDir string) error {
	files, err := deploy.Manifests(chartDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(outDir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(outDir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
