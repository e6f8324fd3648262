package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Table returns the results as one table, one row per (n, p, filter) (markdown
// when md is true, aligned text otherwise), followed by notes naming the
// serialization each filter used.
func Table(rows []Row, md bool) string {
	header := []string{"n", "p", "filter", "add ns", "build s", "present ns", "absent ns",
		fmt.Sprintf("batched absent ns (%d keys a batch)", LookupBatch),
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
		cells = append(cells, []string{fmtN(r.N), p, r.Filter, add, fmtF(r.BuildSeconds(), 3), fmtF(r.PresentNs, 1), fmtF(r.AbsentNs, 1), fmtF(r.BatchNs, 1),
			fmtF(r.ParallelMops, 1), fmt.Sprintf("%.2f", r.BitsPerKey), fmtFP(r), fmtF(r.EncodeMs, 3), fmtF(r.DecodeMs, 3)})
	}
	var sb strings.Builder
	writeTable(&sb, header, "rrlrrrrrrrrrr", cells, md)
	sb.WriteString("\n")
	sb.WriteString("- Times are medians over the rounds. Encode writes to a reused bytes.Buffer; decode reads a bytes.Reader into a new filter.\n")
	sb.WriteString("- build s: one goroutine adding all n keys, in order, to a new filter (hashing included). Batched absent: bloomgate answers each batch with one MayContainMany (bloomgate-hashed: Hash per key, then MayContainHashMany); the peers have no batched lookup, so theirs is their lookup in a loop over the batch.\n")
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

// Targets computes the goals from the same run's rows. The speed ratios use
// the largest n measured (10 M in a full run), at every p; the bits-and-blooms
// ratio uses the smallest p.
func Targets(rows []Row) []Target {
	var ts []Target
	nMax, pMin := 0, math.Inf(1)
	var ps []float64
	for _, r := range rows {
		if r.Filter == NameBloomgate {
			nMax = max(nMax, r.N)
			pMin = math.Min(pMin, r.P)
			if !slices.Contains(ps, r.P) {
				ps = append(ps, r.P)
			}
		}
	}
	ratio := func(what, goal string, limit float64, upper bool, num, den string, p float64, val func(Row) float64) Target {
		at := fmt.Sprintf("n=%s, p=%s", fmtN(nMax), fmtPct(p))
		t := Target{What: fmt.Sprintf(what, at), Goal: goal}
		a, okA := find(rows, num, nMax, p)
		b, okB := find(rows, den, nMax, p)
		if t.Known = okA && okB; t.Known {
			v := val(a) / val(b)
			t.Value = fmt.Sprintf("%.2f× (%.3g / %.3g)", v, val(a), val(b))
			t.Met = (v <= limit) == upper
		}
		return t
	}
	absent := func(r Row) float64 { return r.AbsentNs }
	for _, p := range ps {
		ts = append(ts,
			ratio("absent lookup ns, bloomgate MayContain / blobloom (%s)", "≤ 1.00×", 1, true, NameBloomgate, NameBlobloom, p, absent),
			ratio("(same, hashing in the caller: MayContainHash(Hash(key)) / blobloom, %s)", "≤ 1.00×", 1, true, NameBloomgateH, NameBlobloom, p, absent),
			ratio("batched absent ns per key, bloomgate MayContainMany / blobloom's absent lookup (%s)", "≤ 0.50×", 0.5, true, NameBloomgate, NameBlobloom, p,
				func(r Row) float64 {
					if r.Filter == NameBloomgate {
						return r.BatchNs
					}
					return r.AbsentNs
				}),
			ratio("add ns, bloomgate BloomBuilder.Add / blobloom (%s)", "≤ 1.00×", 1, true, NameBloomgateB, NameBlobloom, p, func(r Row) float64 { return r.AddNs }),
			ratio("build s, bloomgate BloomBuilder / blobloom (%s)", "≤ 1.00×", 1, true, NameBloomgateB, NameBlobloom, p, func(r Row) float64 { return r.BuildSeconds() }),
		)
	}
	{
		ts = append(ts, ratio("absent lookup, bits-and-blooms / bloomgate (%s)", "≥ 3.00×", 3, false, NameBitsAndBloom, NameBloomgate, pMin, absent))
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
