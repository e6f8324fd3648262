package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/bloomgate/bloomgate/filter"
)

func runSize(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("size", flag.ContinueOnError)
	n := fs.Uint64("n", 0, "number of keys the filter must hold (required)")
	p := fs.Float64("p", 0.01, "target false-positive rate at capacity, in (0, 1)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bloomgate size -n KEYS [-p RATE]")
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	s, err := filter.SizeBloom(*n, *p)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate size: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	classic := filter.ClassicBits(*n, *p)
	minimum := filter.MinimumBits(*n, *p)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "keys\t%d\n", s.Capacity)
	fmt.Fprintf(tw, "target FP rate\t%g\n", s.FPRate)
	fmt.Fprintf(tw, "layout\tblocked Bloom, %d × 512-bit blocks\n", s.Blocks)
	fmt.Fprintf(tw, "bits\t%d\n", s.Bits())
	fmt.Fprintf(tw, "bytes\t%d (%s)\n", s.Bytes(), humanBytes(s.Bytes()))
	fmt.Fprintf(tw, "probes (k)\t%d\n", s.K)
	fmt.Fprintf(tw, "bits/key\t%.2f\n", s.BitsPerKey())
	fmt.Fprintf(tw, "classic Bloom\t%.0f bits (%s), %.2f bits/key, k=%d\n", classic, humanBytes(uint64(classic/8)), classic/float64(*n), filter.ClassicK(*p))
	fmt.Fprintf(tw, "information minimum\t%.0f bits (%s), %.2f bits/key; this filter is %.2f× it\n",
		minimum, humanBytes(uint64(minimum/8)), minimum/float64(*n), float64(s.Bits())/minimum)
	tw.Flush()
	fmt.Fprintln(stdout, "\nexpected false-positive rate as the filter fills:")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fill\tkeys\tFP rate\t")
	for _, f := range []float64{0.5, 1, 1.5, 2} {
		keys := uint64(f * float64(*n))
		fmt.Fprintf(tw, "%.1f×\t%d\t%.4g%%\t\n", f, keys, 100*s.FPRateAt(keys))
	}
	tw.Flush()
	return exitOK
}
