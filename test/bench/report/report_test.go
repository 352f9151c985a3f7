package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

const sample = `goos: linux
BenchmarkNodeStageVolume/csi-rclone-2         	       1	  52809156 ns/op	        50.20 first-ms	        50.85 p50-ms	        58.30 p95-ms	         4.000 samples
BenchmarkNodeStageVolume/rclone-mount-2       	       1	 117700877 ns/op	       137.5 first-ms	       114.6 p50-ms	       125.4 p95-ms	         4.000 samples
BenchmarkSecretService/grpc/callers=8-2        	       1	   1106832 ns/op	       903.5 calls/s	         7.859 p50-ms	        20.72 p99-ms
BenchmarkSecretService/in-process/callers=ncpu-2 	       1	    772154 ns/op	      1295 calls/s	         1.449 p50-ms	        87.96 p99-ms
BenchmarkNodeStageVolume/csi-rclone-2         	       1	  52809156 ns/op	        52.20 first-ms	        40.85 p50-ms	        58.30 p95-ms	         4.000 samples
BenchmarkNodeStageVolume/csi-rclone-2         	       1	  52809156 ns/op	        52.20 first-ms	        45.85 p50-ms	        58.30 p95-ms	         4.000 samples
--- FAIL: BenchmarkSeqRead/csi-rclone
`

// The table picks each figure and its baseline, the median of repeated
// runs, and marks what was not measured.
func TestTable(t *testing.T) {
	res, err := benchkit.Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Get("BenchmarkNodeStageVolume/csi-rclone", "p50-ms"); v != 45.85 {
		t.Errorf("median p50 = %v, want 45.85", v)
	}
	if lo, _ := res.Get("BenchmarkNodeStageVolume/csi-rclone", "min-p50-ms"); lo != 40.85 {
		t.Errorf("min p50 = %v, want 40.85", lo)
	}
	var b strings.Builder
	printTable(&b, res, full)
	out := b.String()
	for _, want := range []string{
		"| 1 | NodeStageVolume p50, ms (20 volumes) | 45.9 (40.9–50.9) | 115 | 0.40× |",
		"| 7 | Decrypt over gRPC, 8 callers, calls/s | 904 | 1295 | 0.70× |",
		"| 3 | Sequential read of 1024 MiB, MB/s | — | — | — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkScale's points come sorted by volume count, and plot.
func TestScale(t *testing.T) {
	res, err := benchkit.Parse(strings.NewReader(`BenchmarkScale/volumes=10-2 1 68417609 ns/op 219.6 PSS-MiB 54.56 p50-ms 119.3 p95-ms 13.45 per-volume-PSS-MiB 1.652 recovery-s 10.00 volumes
BenchmarkScale/volumes=1-2 1 75345207 ns/op 100.0 PSS-MiB 75.35 p50-ms 75.35 p95-ms 13.65 per-volume-PSS-MiB 0.1116 recovery-s 1.000 volumes
`))
	if err != nil {
		t.Fatal(err)
	}
	pts := scalePoints(res)
	if len(pts) != 2 || pts[0].volumes != 1 || pts[1].volumes != 10 || pts[1].p95 != 119.3 || pts[1].recovery != 1.652 {
		t.Fatalf("points %+v", pts)
	}
	png := filepath.Join(t.TempDir(), "scale.png")
	if err := plotScale(png, pts); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
}

// The CPU table shows each read variant's CPU per GiB, and nothing when the
// run did not measure it.
func TestCPUTable(t *testing.T) {
	const out = `BenchmarkSeqRead/csi-rclone-2 	1	2955430147 ns/op	 400.0 MB/s	 1.000 mount-cpu-s	 0.5000 mount-sys-s	 2.000 bench-cpu-s	 0.2500 other-cpu-s	 90.00 busy-%	 10.00 idle-%
`
	res, err := benchkit.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	half := full
	half.fileMiB = 512
	var b strings.Builder
	printCPU(&b, res, half)
	if want := "| csi-rclone (its mount worker) | 400 | 2.00 (1.00) | 4.00 | 0.50 | 90.0 | 10.0 |"; !strings.Contains(b.String(), want) {
		t.Errorf("CPU table lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	printCPU(&b, benchkit.Results{}, full)
	if b.Len() != 0 {
		t.Errorf("CPU table of a run without CPU figures: %q", b.String())
	}
}
