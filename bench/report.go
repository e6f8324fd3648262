package bench

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
)

// Table returns the results as one table, one row per (n, p, filter) (markdown
// when md is true, aligned text otherwise), followed by notes naming the
// serialization each filter used.
func Table(rows []Row, md bool) string {
	header := []string{"n", "p", "filter", "add ns", "present ns", "absent ns",
		fmt.Sprintf("parallel Mlookups/s (%d goroutines, absent keys)", Goroutines),
		"bits/key", "measured FP", "encode ms", "decode ms"}
	cells := make([][]string, 0, len(rows))
	for _, r := range rows {
		p := fmtPct(r.P)
		add := fmtF(r.AddNs, 1)
		if r.Static {
			p += " (fixed)"
			add = "—"
		}
		cells = append(cells, []string{fmtN(r.N), p, r.Filter, add, fmtF(r.PresentNs, 1), fmtF(r.AbsentNs, 1),
			fmtF(r.ParallelMops, 1), fmt.Sprintf("%.2f", r.BitsPerKey), fmtFP(r), fmtF(r.EncodeMs, 3), fmtF(r.DecodeMs, 3)})
	}
	var sb strings.Builder
	writeTable(&sb, header, "rrlrrrrrrrr", cells, md)
	sb.WriteString("\n")
	sb.WriteString("- Times are medians over the rounds. Encode writes to a reused bytes.Buffer; decode reads a bytes.Reader into a new filter.\n")
	seen := map[string]bool{}
	for _, c := range Contenders() {
		for _, r := range rows {
			if r.Filter == c.Name && !seen[c.Name] {
				seen[c.Name] = true
				fmt.Fprintf(&sb, "- %s: encode / decode = %s.\n", c.Name, c.Codec)
			}
		}
	}
	for _, r := range rows {
		if r.Static {
			fmt.Fprintf(&sb, "- %s at n=%s: static, built once from all keys in %.1f ns/key (hashing included); it cannot Add.\n", r.Filter, fmtN(r.N), r.BuildNsKey)
		}
	}
	return sb.String()
}

// writeTable writes a markdown table (align: 'l' or 'r' per column) or, when
// md is false, the same table as aligned text.
func writeTable(sb *strings.Builder, header []string, align string, cells [][]string, md bool) {
	if md {
		sb.WriteString("| " + strings.Join(header, " | ") + " |\n|")
		for i := range header {
			if align[i] == 'r' {
				sb.WriteString("---:|")
			} else {
				sb.WriteString("---|")
			}
		}
		sb.WriteString("\n")
		for _, c := range cells {
			sb.WriteString("| " + strings.Join(c, " | ") + " |\n")
		}
		return
	}
	tw := tabwriter.NewWriter(sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, c := range append([][]string{header}, cells...) {
		tw.Write([]byte(strings.Join(c, "\t") + "\t\n"))
	}
	tw.Flush()
}

// Target is one goal checked against measured numbers.
type Target struct {
	What  string
	Value string
	Goal  string
	Met   bool
	// Known is false when the run lacks the rows the target needs.
	Known bool
}

// Targets computes the goals from the same run's rows. The lookup ratios use
// the largest n and the smallest p measured (10 M and 0.1 % in a full run).
func Targets(rows []Row) []Target {
	var ts []Target
	nMax, pMin := 0, math.Inf(1)
	for _, r := range rows {
		if r.Filter == NameBloomgate {
			nMax = max(nMax, r.N)
			pMin = math.Min(pMin, r.P)
		}
	}
	at := fmt.Sprintf("n=%s, p=%s", fmtN(nMax), fmtPct(pMin))
	bg, okBG := find(rows, NameBloomgate, nMax, pMin)
	bl, okBL := find(rows, NameBlobloom, nMax, pMin)
	bb, okBB := find(rows, NameBitsAndBloom, nMax, pMin)
	{
		t := Target{What: "absent lookup, bloomgate / blobloom (" + at + ")", Goal: "≤ 1.00×", Known: okBG && okBL}
		if t.Known {
			v := bg.AbsentNs / bl.AbsentNs
			t.Value = fmt.Sprintf("%.2f× (%.1f / %.1f ns)", v, bg.AbsentNs, bl.AbsentNs)
			t.Met = v <= 1
		}
		ts = append(ts, t)
	}
	if bh, ok := find(rows, NameBloomgateH, nMax, pMin); ok && okBL {
		v := bh.AbsentNs / bl.AbsentNs
		ts = append(ts, Target{
			What:  "(same, bloomgate hashing in the caller: MayContainHash(Hash(key)) / blobloom)",
			Value: fmt.Sprintf("%.2f× (%.1f / %.1f ns)", v, bh.AbsentNs, bl.AbsentNs),
			Goal:  "≤ 1.00×", Met: v <= 1, Known: true,
		})
	}
	{
		t := Target{What: "absent lookup, bits-and-blooms / bloomgate (" + at + ")", Goal: "≥ 3.00×", Known: okBG && okBB}
		if t.Known {
			v := bb.AbsentNs / bg.AbsentNs
			t.Value = fmt.Sprintf("%.2f× (%.1f / %.1f ns)", v, bb.AbsentNs, bg.AbsentNs)
			t.Met = v >= 3
		}
		ts = append(ts, t)
	}
	for _, r := range rows {
		if r.Filter != NameBloomgate {
			continue
		}
		t := Target{What: fmt.Sprintf("bloomgate bits/key vs classic Bloom at its measured FP (n=%s, p=%s)", fmtN(r.N), fmtPct(r.P)), Goal: "≤ 1.10×", Known: r.FPCount > 0}
		if t.Known {
			classic := ClassicBitsPerKey(r.FP)
			v := r.BitsPerKey / classic
			t.Value = fmt.Sprintf("%.3f× (%.2f vs %.2f bits/key at FP %.4f %%)", v, r.BitsPerKey, classic, 100*r.FP)
			t.Met = v <= 1.10
		}
		ts = append(ts, t)
	}
	for _, r := range rows {
		if r.Filter != NameBloomgate || r.N != nMax {
			continue
		}
		v := r.DecodeGBps()
		ts = append(ts, Target{
			What:  fmt.Sprintf("bloomgate decode from memory, checksum verified (n=%s, p=%s, %.1f MB)", fmtN(r.N), fmtPct(r.P), float64(r.EncodedBytes)/1e6),
			Value: fmt.Sprintf("%.2f GB/s", v), Goal: "≥ 1 GB/s", Met: v >= 1, Known: true,
		})
	}
	return ts
}

// TargetsTable renders targets as a table (markdown when md is true).
func TargetsTable(ts []Target, md bool) string {
	cells := make([][]string, 0, len(ts))
	for _, t := range ts {
		met, v := "no", t.Value
		switch {
		case !t.Known:
			met, v = "not measured", "—"
		case t.Met:
			met = "yes"
		}
		cells = append(cells, []string{t.What, v, t.Goal, met})
	}
	var sb strings.Builder
	writeTable(&sb, []string{"target", "measured", "goal", "met"}, "lrrl", cells, md)
	return sb.String()
}

// ClassicBitsPerKey is the bits per key a classic Bloom filter needs for
// false-positive rate p: -ln p / (ln 2)².
func ClassicBitsPerKey(p float64) float64 { return -math.Log(p) / (math.Ln2 * math.Ln2) }

func find(rows []Row, name string, n int, p float64) (Row, bool) {
	for _, r := range rows {
		if r.Filter == name && r.N == n && r.P == p {
			return r, true
		}
	}
	return Row{}, false
}

// fmtN writes 10000000 as 10M and 100000 as 100k.
func fmtN(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return fmt.Sprintf("%dM", n/1e6)
	case n >= 1e3 && n%1e3 == 0:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}

func fmtPct(p float64) string { return fmt.Sprintf("%.3g %%", 100*p) }

func fmtF(v float64, prec int) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func fmtFP(r Row) string { return fmt.Sprintf("%.4f %%", 100*r.FP) }
