package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// FamilyConfig configures RunFamilies.
type FamilyConfig struct {
	// N lists the key counts. Required.
	N []int
	// Absent is how many absent keys FP rates are measured on.
	// Default (zero): DefaultAbsent.
	Absent int
	// BenchTime is how long each measurement runs. Default (zero): 1s.
	BenchTime time.Duration
	// Count is how many rounds of timings to take; rows report the median.
	// Default (zero): 1.
	Count int
	// Groups are the filters compared. Default (nil): FamilyGroups().
	Groups []FamilyGroup
	// Progress, if not nil, receives a line per measurement.
	Progress io.Writer
}

// FamilyRow is what RunFamilies measured for one filter at one n. Times not
// applicable (Remove on a Scalable) are NaN.
type FamilyRow struct {
	Family  string
	Setting string
	Filter  string
	Ours    bool
	P       float64 // FamilyGroup.P
	Params  string  // FamilyFilter.Describe of the built filter
	N       int

	AddNs      float64
	PresentNs  float64
	AbsentNs   float64
	RemoveNs   float64
	Bytes      int
	BitsPerKey float64
	FP         float64
	FPCount    int
	Absent     int
	// FailedAdds counts Adds the filter reported failed while it was
	// built; FalseNegatives counts built keys it then reported absent.
	FailedAdds     int
	FalseNegatives int
}

// RunFamilies measures every group's filters at every n. Each filter is
// built once per n; the rounds visit every filter of a group in turn.
func RunFamilies(cfg FamilyConfig) ([]FamilyRow, error) {
	if len(cfg.N) == 0 {
		return nil, errors.New("bench: FamilyConfig.N is required")
	}
	for _, n := range cfg.N {
		if n <= 0 {
			return nil, fmt.Errorf("bench: key count %d must be > 0", n)
		}
	}
	if cfg.Absent == 0 {
		cfg.Absent = DefaultAbsent
	}
	cfg.Count = max(cfg.Count, 1)
	if cfg.Groups == nil {
		cfg.Groups = FamilyGroups()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	restore, err := setBenchTime(cfg.BenchTime)
	if err != nil {
		return nil, err
	}
	defer restore()

	var rows []FamilyRow
	for _, n := range cfg.N {
		start := time.Now()
		keys := NewKeys(n, cfg.Absent)
		fmt.Fprintf(cfg.Progress, "n=%d: %d present + %d absent keys in %v\n", n, n, cfg.Absent, time.Since(start).Round(time.Millisecond))
		for _, g := range cfg.Groups {
			var group []*familySubject
			for _, m := range g.Members {
				s, err := prepareFamily(g, m, keys)
				if err != nil {
					return nil, fmt.Errorf("%s %s (%s) n=%d: %w", g.Family, m.Name, g.Setting, n, err)
				}
				group = append(group, s)
			}
			for range cfg.Count {
				for _, s := range group {
					s.time(cfg.Progress, keys)
				}
			}
			for _, s := range group {
				r := s.row
				r.AddNs, r.PresentNs, r.AbsentNs, r.RemoveNs = median(s.add), median(s.present), median(s.absent), median(s.remove)
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

type familySubject struct {
	row                          FamilyRow
	f                            FamilyFilter
	add, present, absent, remove []float64
}

func prepareFamily(g FamilyGroup, m Member, keys *Keys) (*familySubject, error) {
	n := len(keys.Present)
	f, err := m.Build(keys.Present)
	if err != nil {
		return nil, err
	}
	r := FamilyRow{Family: g.Family, Setting: g.Setting, Filter: m.Name, Ours: m.Ours, P: g.P, N: n, Absent: len(keys.Absent)}
	if fa, ok := f.(interface{ FailedAdds() int }); ok {
		r.FailedAdds = fa.FailedAdds()
	}
	r.FalseNegatives = n - f.Count(keys.Present)
	if m.Ours && (r.FailedAdds > 0 || r.FalseNegatives > 0) {
		return nil, fmt.Errorf("%d failed adds, %d false negatives", r.FailedAdds, r.FalseNegatives)
	}
	r.FPCount = f.Count(keys.Absent)
	r.FP = float64(r.FPCount) / float64(len(keys.Absent))
	r.Bytes = f.Bytes()
	r.BitsPerKey = float64(r.Bytes) * 8 / float64(n)
	r.Params = f.Describe()
	return &familySubject{row: r, f: f}, nil
}

func (s *familySubject) time(progress io.Writer, keys *Keys) {
	f, r := s.f, &s.row
	bench := func(what string, samples *[]float64, fn func(b *testing.B)) {
		res := testing.Benchmark(fn)
		ns := float64(res.T.Nanoseconds()) / float64(max(res.N, 1))
		fmt.Fprintf(progress, "%-9s %-30s n=%-9d %-8s %12.1f ns/op  (%d ops)\n", r.Family, r.Filter, r.N, what, ns, res.N)
		*samples = append(*samples, ns)
	}
	bench("add", &s.add, func(b *testing.B) { f.BenchAdd(b, keys.Present) })
	bench("present", &s.present, func(b *testing.B) { f.BenchLookup(b, keys.Present) })
	bench("absent", &s.absent, func(b *testing.B) { f.BenchLookup(b, keys.Absent) })
	if rm, ok := f.(RemoveBencher); ok {
		bench("remove", &s.remove, func(b *testing.B) { rm.BenchRemove(b, keys.Present) })
	}
}

// FamilyTable renders the rows (markdown when md is true), followed by notes
// on each filter's parameters and on failed adds.
func FamilyTable(rows []FamilyRow, md bool) string {
	header := []string{"n", "family", "setting", "filter", "add ns", "present ns", "absent ns", "remove ns", "bits/key", "measured FP"}
	cells := make([][]string, 0, len(rows))
	for _, r := range rows {
		cells = append(cells, []string{fmtN(r.N), r.Family, r.Setting, r.Filter, fmtF(r.AddNs, 1), fmtF(r.PresentNs, 1),
			fmtF(r.AbsentNs, 1), fmtF(r.RemoveNs, 1), fmt.Sprintf("%.2f", r.BitsPerKey), fmt.Sprintf("%.4f %%", 100*r.FP)})
	}
	var sb strings.Builder
	writeTable(&sb, header, "rlllrrrrrr", cells, md)
	sb.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "- n=%s, %s %s: %s", fmtN(r.N), r.Family, r.Filter, r.Params)
		if r.FailedAdds > 0 || r.FalseNegatives > 0 {
			fmt.Fprintf(&sb, "; **%d failed adds, %d of the %s keys added not found (false negatives)**", r.FailedAdds, r.FalseNegatives, fmtN(r.N))
		}
		sb.WriteString(".\n")
	}
	return sb.String()
}

// FamilyTargets computes, for each of bloomgate's filters in each group at
// each n, the goal "no slower than the fastest peer and no more bits per key
// at equal measured FP": absent-lookup and add time over the fastest peer's,
// and bits per key over those of the peer with the fewest, met when ours is
// no larger and our measured FP is no higher (within filtertest.FPBound of the
// peer's rate on the same absent keys). The bits per key beyond log2(1/FP)
// of each side are shown too, to compare sides whose rates differ.
func FamilyTargets(rows []FamilyRow) []Target {
	var ts []Target
	for _, r := range rows {
		if !r.Ours {
			continue
		}
		var peers []FamilyRow
		for _, q := range rows {
			if !q.Ours && q.N == r.N && q.Family == r.Family && q.Setting == r.Setting {
				peers = append(peers, q)
			}
		}
		if len(peers) == 0 {
			continue
		}
		at := fmt.Sprintf("%s %s (%s, n=%s)", r.Family, r.Filter, r.Setting, fmtN(r.N))
		ratio := func(what string, ours float64, get func(FamilyRow) float64) {
			best := peers[0]
			for _, q := range peers[1:] {
				if get(q) < get(best) {
					best = q
				}
			}
			t := Target{What: fmt.Sprintf("%s ns, %s / fastest peer (%s)", what, at, best.Filter), Goal: "≤ 1.00×",
				Known: !math.IsNaN(ours) && !math.IsNaN(get(best))}
			if t.Known {
				v := ours / get(best)
				t.Value = fmt.Sprintf("%.2f× (%.1f / %.1f ns)", v, ours, get(best))
				t.Met = v <= 1
			}
			ts = append(ts, t)
		}
		ratio("absent lookup", r.AbsentNs, func(q FamilyRow) float64 { return q.AbsentNs })
		ratio("add", r.AddNs, func(q FamilyRow) float64 { return q.AddNs })
		best := peers[0]
		for _, q := range peers[1:] {
			if q.BitsPerKey < best.BitsPerKey {
				best = q
			}
		}
		v := r.BitsPerKey / best.BitsPerKey
		fpOK := r.FPCount <= filtertest.FPBound(r.Absent, best.FP)
		ts = append(ts, Target{
			What: fmt.Sprintf("bits/key, %s / fewest of the peers (%s)", at, best.Filter),
			Value: fmt.Sprintf("%.3f× (%.2f at FP %.4f %% vs %.2f at FP %.4f %%; over log2(1/FP): %+.2f vs %+.2f)",
				v, r.BitsPerKey, 100*r.FP, best.BitsPerKey, 100*best.FP, overLowerBound(r), overLowerBound(best)),
			Goal: "≤ 1.00× at FP ≤ peer's", Met: v <= 1 && fpOK, Known: true,
		})
	}
	return ts
}

// overLowerBound is how many bits per key r uses beyond log2(1/FP), the least
// any filter with its measured false-positive rate needs: a measure of space
// efficiency that stays comparable when two filters' rates differ.
func overLowerBound(r FamilyRow) float64 {
	if r.FPCount == 0 {
		return math.NaN()
	}
	return r.BitsPerKey - math.Log2(1/r.FP)
}
