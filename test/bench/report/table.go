package main

import (
	"fmt"
	"io"
	"math"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

// ref names one measured value: a benchmark (without -GOMAXPROCS) and a unit.
type ref struct{ name, unit string }

type row struct {
	sec    string
	figure string
	ours   ref
	base   ref
	baseIs string
}

const (
	stage   = "BenchmarkNodeStageVolume/"
	publish = "BenchmarkNodePublishVolume/"
	read    = "BenchmarkSeqRead/"
	write   = "BenchmarkSeqWrite/"
	small   = "BenchmarkSmallFiles/"
	memory  = "BenchmarkMemory/"
	recov   = "BenchmarkRecovery/"
	secret  = "BenchmarkSecretService/"
)

func rows(s sizes) []row {
	c := fmt.Sprintf("callers=%d", s.conc)
	vt := fmt.Sprintf("%d volumes × %d pods", s.volumes, s.targets)
	net := ""
	if s.profile != "" && s.profile != "loopback" {
		net = " (" + s.profile + ")"
	}
	return []row{
		{"1", fmt.Sprintf("NodeStageVolume p50, ms (%d volumes)", s.volumes), ref{stage + "csi-rclone", "p50-ms"}, ref{stage + "rclone-mount", "p50-ms"}, "`rclone mount --daemon` until in mountinfo and a stat answers"},
		{"1", "NodeStageVolume p95, ms", ref{stage + "csi-rclone", "p95-ms"}, ref{stage + "rclone-mount", "p95-ms"}, "same"},
		{"2", fmt.Sprintf("NodePublishVolume p50, ms (%d targets)", s.volumes*s.targets), ref{publish + "csi-rclone", "p50-ms"}, ref{publish + "bind-mount", "p50-ms"}, "the bind mount alone: one mount(2) MS_BIND"},
		{"2", "NodePublishVolume p95, ms", ref{publish + "csi-rclone", "p95-ms"}, ref{publish + "bind-mount", "p95-ms"}, "same"},
		{"3", fmt.Sprintf("Sequential read of %d MiB%s, MB/s", s.fileMiB, net), ref{read + "csi-rclone", "MB/s"}, ref{read + "rclone-mount2-same", "MB/s"}, "plain `rclone mount2` (go-fuse, as the workers) with the driver's options: the driver's overhead"},
		{"3", "″", ref{read + "csi-rclone", "MB/s"}, ref{read + "rclone-mount2", "MB/s"}, "plain `rclone mount2` with rclone's defaults"},
		{"3", "″", ref{read + "csi-rclone", "MB/s"}, ref{read + "rclone-cat", "MB/s"}, "`rclone cat`: one stream from S3"},
		{"3", "″", ref{read + "csi-rclone", "MB/s"}, ref{read + "rclone-copy-mt8", "MB/s"}, "`rclone copy --multi-thread-streams 8` to a local dir: the backend's parallel limit"},
		{"3", fmt.Sprintf("Sequential write of %d MiB%s until close, MB/s", s.fileMiB, net), ref{write + "csi-rclone", "MB/s"}, ref{write + "rclone-mount2-same", "MB/s"}, "plain `rclone mount2`, the driver's options"},
		{"3", "″", ref{write + "csi-rclone", "MB/s"}, ref{write + "rclone-mount2", "MB/s"}, "plain `rclone mount2`, rclone's defaults"},
		{"3", "Same write until the object is in the bucket, MB/s", ref{write + "csi-rclone", "synced-MB/s"}, ref{write + "rclone-mount2-same", "synced-MB/s"}, "plain `rclone mount2`, the driver's options"},
		{"3", "″", ref{write + "csi-rclone", "synced-MB/s"}, ref{write + "rclone-rcat", "MB/s"}, "`rclone rcat` to S3: one stream"},
		{"4", fmt.Sprintf("List %d objects%s (ls), ms", s.objects, net), ref{small + "csi-rclone", "ls-ms"}, ref{small + "rclone-mount2", "ls-ms"}, "plain `rclone mount2`, rclone's defaults"},
		{"4", "List and stat each (ls -l), ms", ref{small + "csi-rclone", "ls-l-ms"}, ref{small + "rclone-mount2", "ls-l-ms"}, "same"},
		{"4", "lstat of one listed file, ms", ref{small + "csi-rclone", "stat-ms"}, ref{small + "rclone-mount2", "stat-ms"}, "same"},
		{"4", fmt.Sprintf("Read %d files of %d KiB, files/s", s.reads, s.smallKiB), ref{small + "csi-rclone", "files/s"}, ref{small + "rclone-mount2", "files/s"}, "same"},
		{"4", "Read one small file p95, ms", ref{small + "csi-rclone", "p95-ms"}, ref{small + "rclone-mount2", "p95-ms"}, "same"},
		{"4", "List (ls), ms", ref{small + "csi-rclone", "ls-ms"}, ref{small + "rclone-mount2-same", "ls-ms"}, "plain `rclone mount2`, the driver's options"},
		{"4", "Read small files, files/s", ref{small + "csi-rclone", "files/s"}, ref{small + "rclone-mount2-same", "files/s"}, "same"},
		{"5", "Memory, " + vt + ", PSS MiB", ref{memory + "csi-rclone", "PSS-MiB"}, ref{memory + "rclone-mount", "PSS-MiB"}, fmt.Sprintf("%d plain `rclone mount`s, one per pod", s.volumes*s.targets)},
		{"5", "Memory, " + vt + ", RSS MiB", ref{memory + "csi-rclone", "RSS-MiB"}, ref{memory + "rclone-mount", "RSS-MiB"}, "same"},
		{"5", "Memory per idle staged volume, PSS MiB", ref{memory + "csi-rclone", "per-volume-PSS-MiB"}, ref{memory + "rclone-mount", "per-mount-PSS-MiB"}, "one plain `rclone mount`"},
		{"6", "After kill -9 of driver + workers: every target reads, s", ref{recov + "driver-restart", "total-s"}, ref{recov + "first-setup", "total-s"}, fmt.Sprintf("the first stage + publish of the same %s, one call after the other", vt)},
		{"6", "After a worker's death: its targets read, p50 ms", ref{recov + "worker-death", "p50-ms"}, ref{recov + "first-setup", "stage-p50-ms"}, "NodeStageVolume p50 of the same volumes"},
		{"7", fmt.Sprintf("Decrypt over gRPC, %d callers, calls/s", s.conc), ref{secret + "grpc/" + c, "calls/s"}, ref{secret + "in-process/callers=ncpu", "calls/s"}, "the same work (sign, verify, decrypt) in process, one caller per core: the CPU's ceiling"},
		{"7", fmt.Sprintf("Decrypt over HTTP, %d callers, calls/s", s.conc), ref{secret + "http/" + c, "calls/s"}, ref{secret + "in-process/callers=ncpu", "calls/s"}, "same"},
		{"7", "Decrypt over gRPC, 1 caller, p99 ms", ref{secret + "grpc/callers=1", "p99-ms"}, ref{secret + "in-process/callers=1", "p99-ms"}, "the same work in process, one call at a time"},
		{"7", "Decrypt over HTTP, 1 caller, p99 ms", ref{secret + "http/callers=1", "p99-ms"}, ref{secret + "in-process/callers=1", "p99-ms"}, "same"},
		{"7", fmt.Sprintf("Decrypt over gRPC, %d callers, p99 ms", s.conc), ref{secret + "grpc/" + c, "p99-ms"}, ref{secret + "in-process/callers=1", "p99-ms"}, "same"},
		{"7", fmt.Sprintf("Decrypt over HTTP, %d callers, p99 ms", s.conc), ref{secret + "http/" + c, "p99-ms"}, ref{secret + "in-process/callers=1", "p99-ms"}, "same"},
	}
}

// printTable prints the markdown table; "—" marks a value not measured.
func printTable(w io.Writer, res benchkit.Results, s sizes) {
	fmt.Fprintln(w, "| # | figure | csi-rclone | baseline | ratio | baseline is |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|")
	for _, r := range rows(s) {
		ours, okO := res.Get(r.ours.name, r.ours.unit)
		base, okB := res.Get(r.base.name, r.base.unit)
		ratio := "—"
		if okO && okB && base != 0 {
			ratio = fmt.Sprintf("%.2f×", ours/base)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.sec, r.figure, withRange(res, r.ours, ours, okO), withRange(res, r.base, base, okB), ratio, r.baseIs)
	}
}

func value(v float64, ok bool) string {
	switch a := math.Abs(v); {
	case !ok:
		return "—"
	case a == 0:
		return "0"
	case a < 0.1:
		return fmt.Sprintf("%.3f", v)
	case a < 10:
		return fmt.Sprintf("%.2f", v)
	case a < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// withRange is the value and, where the benchmark reports one (interleaved
// rounds), the range of its samples: "287 (270–301)".
func withRange(res benchkit.Results, r ref, v float64, ok bool) string {
	lo, okL := res.Get(r.name, "min-"+r.unit)
	hi, okH := res.Get(r.name, "max-"+r.unit)
	if !ok || !okL || !okH {
		return value(v, ok)
	}
	return fmt.Sprintf("%s (%s–%s)", value(v, ok), value(lo, true), value(hi, true))
}
