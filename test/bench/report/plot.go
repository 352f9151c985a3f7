package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/csi-rclone/csi-rclone/test/bench/benchkit"
)

const scale = "BenchmarkScale/volumes="

// scalePoint is BenchmarkScale's result at one volume count.
type scalePoint struct {
	name                          string
	volumes                       int
	p50, p95, pss, recovery, pss0 float64
}

// scalePoints are BenchmarkScale's results, by volume count.
func scalePoints(res benchkit.Results) []scalePoint {
	var out []scalePoint
	for name := range res {
		n, err := strconv.Atoi(strings.TrimPrefix(name, scale))
		if !strings.HasPrefix(name, scale) || err != nil {
			continue
		}
		get := func(unit string) float64 { v, _ := res.Get(name, unit); return v }
		out = append(out, scalePoint{name: name, volumes: n, p50: get("p50-ms"), p95: get("p95-ms"),
			pss: get("per-volume-PSS-MiB"), recovery: get("recovery-s"), pss0: get("PSS-MiB")})
	}
	slices.SortFunc(out, func(a, b scalePoint) int { return a.volumes - b.volumes })
	return out
}

// printScale prints BenchmarkScale's table: medians, and ranges of
// repeated runs (-count).
func printScale(w io.Writer, res benchkit.Results, pts []scalePoint) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| staged volumes | NodeStageVolume p50, ms | p95, ms | PSS per idle volume, MiB | PSS of driver + workers, MiB | all targets read again after kill -9, s |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, p := range pts {
		v := func(unit string, x float64) string { return withRange(res, ref{p.name, unit}, x, true) }
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s |\n", p.volumes, v("p50-ms", p.p50), v("p95-ms", p.p95),
			v("per-volume-PSS-MiB", p.pss), v("PSS-MiB", p.pss0), v("recovery-s", p.recovery))
	}
}

// plotScale draws BenchmarkScale's results side by side into a PNG: stage
// latency, memory per volume and recovery time against the volume count.
func plotScale(path string, pts []scalePoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("no BenchmarkScale results to plot")
	}
	xy := func(f func(scalePoint) float64) plotter.XYs {
		out := make(plotter.XYs, len(pts))
		for i, p := range pts {
			out[i] = plotter.XY{X: float64(p.volumes), Y: f(p)}
		}
		return out
	}
	panel := func(title, ylabel string, lines ...any) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "staged volumes"
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return nil, err
		}
		return p, nil
	}
	stage, err := panel("NodeStageVolume", "ms", "p50", xy(func(p scalePoint) float64 { return p.p50 }),
		"p95", xy(func(p scalePoint) float64 { return p.p95 }))
	if err != nil {
		return err
	}
	mem, err := panel("Memory per idle volume", "PSS, MiB", "per volume", xy(func(p scalePoint) float64 { return p.pss }))
	if err != nil {
		return err
	}
	rec, err := panel("Recovery after kill -9", "s until all targets read", "all volumes", xy(func(p scalePoint) float64 { return p.recovery }))
	if err != nil {
		return err
	}
	plots := [][]*plot.Plot{{stage, mem, rec}}
	img := vgimg.New(vg.Points(900), vg.Points(300))
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 3, PadX: 6 * vg.Millimeter, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, t, dc)
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
