package main

import (
	"fmt"
	"io"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

// readVariants are BenchmarkSeqRead's variants, in the order of the table.
var readVariants = []struct{ name, is string }{
	{"csi-rclone", "csi-rclone (its mount worker)"},
	{"rclone-mount2-same", "plain `rclone mount2`, driver's options"},
	{"rclone-mount2", "plain `rclone mount2`, rclone's defaults"},
	{"rclone-cat", "`rclone cat`"},
	{"rclone-copy-mt8", "`rclone copy --multi-thread-streams 8`"},
}

// printCPU prints where the CPU went during each sequential read
// (BenchmarkSeqRead's *-cpu-s and machine %), per GiB read, if measured.
func printCPU(w io.Writer, res benchkit.Results, s sizes) {
	gib := float64(s.fileMiB) / 1024
	header := false
	for _, v := range readVariants {
		name := read + v.name
		if _, ok := res.Get(name, "mount-cpu-s"); !ok {
			continue
		}
		if !header {
			fmt.Fprint(w, "\nWhere the CPU went during the sequential read (medians; CPU seconds per GiB read; machine: per cent of all its cores):\n\n")
			fmt.Fprintln(w, "| variant | MB/s | reading process, CPU s/GiB (of it kernel) | this process: S3 server, proxy, reader | rest of the machine | machine busy % | idle % |")
			fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
			header = true
		}
		get := func(unit string, scale float64) string {
			x, ok := res.Get(name, unit)
			return value(x/scale, ok)
		}
		fmt.Fprintf(w, "| %s | %s | %s (%s) | %s | %s | %s | %s |\n", v.is,
			get("MB/s", 1), get("mount-cpu-s", gib), get("mount-sys-s", gib), get("bench-cpu-s", gib),
			get("other-cpu-s", gib), get("busy-%", 1), get("idle-%", 1))
	}
}
