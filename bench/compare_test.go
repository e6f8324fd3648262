package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// TestRun runs what cmd/compare runs, on few keys and briefly.
func TestRun(t *testing.T) {
	const n, absent = 20_000, 400_000
	rates := []float64{0.01, 0.001}
	rows, err := Run(Config{N: []int{n}, P: rates, Absent: absent, BenchTime: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	table := Table(rows, true)
	t.Log("\n" + table)
	for _, c := range Contenders() {
		want := len(rates)
		if c.Static {
			want = 1
		}
		got := 0
		for _, r := range rows {
			if r.Filter != c.Name {
				continue
			}
			got++
			if r.N != n || !(r.PresentNs > 0 && r.AbsentNs > 0 && r.BatchNs > 0 && r.BuildNsKey > 0 && r.ParallelMops > 0 && r.EncodeMs > 0 && r.DecodeMs > 0) {
				t.Errorf("%s: incomplete row %+v", c.Name, r)
			}
			if c.Static == (r.AddNs > 0) {
				t.Errorf("%s: add %v ns for a static=%v filter", c.Name, r.AddNs, c.Static)
			}
		}
		if got != want {
			t.Errorf("%s: %d rows, want %d", c.Name, got, want)
		}
		if lines := strings.Count(table, "| "+c.Name+" |"); lines != want {
			t.Errorf("%s: %d table lines, want %d", c.Name, lines, want)
		}
	}
	for _, r := range rows {
		if r.Filter != NameBloomgate {
			continue
		}
		if limit := filtertest.FPBound(r.Absent, r.P); r.FPCount > limit {
			t.Errorf("bloomgate p=%g: %d false positives in %d, limit %d", r.P, r.FPCount, r.Absent, limit)
		}
	}
	ts := Targets(rows)
	if want := 1 + 7*len(rates); len(ts) != want {
		t.Errorf("%d targets, want %d", len(ts), want)
	}
	for _, tg := range ts {
		if !tg.Known {
			t.Errorf("target %q not computed", tg.What)
		}
	}
	t.Log("\n" + TargetsTable(ts, true))
}

// TestRunFamilies runs what cmd/compare -families runs, on few keys and
// briefly.
func TestRunFamilies(t *testing.T) {
	const n, absent = 20_000, 200_000
	groups := FamilyGroups()
	rows, err := RunFamilies(FamilyConfig{N: []int{n}, Absent: absent, BenchTime: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	table := FamilyTable(rows, true)
	t.Log("\n" + table)
	want, ours := 0, 0
	for _, g := range groups {
		want += len(g.Members)
		for _, m := range g.Members {
			if m.Ours {
				ours++
			}
		}
	}
	if len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	for _, r := range rows {
		if r.N != n || !(r.AddNs > 0 && r.PresentNs > 0 && r.AbsentNs > 0 && r.BitsPerKey > 0) {
			t.Errorf("%s %s: incomplete row %+v", r.Family, r.Filter, r)
		}
		if canRemove := r.Family != "scalable"; canRemove != (r.RemoveNs > 0) {
			t.Errorf("%s %s: remove %v ns", r.Family, r.Filter, r.RemoveNs)
		}
		if !r.Ours {
			continue
		}
		if r.FailedAdds > 0 || r.FalseNegatives > 0 {
			t.Errorf("%s %s: %d failed adds, %d false negatives", r.Family, r.Filter, r.FailedAdds, r.FalseNegatives)
		}
		if limit := filtertest.FPBound(r.Absent, r.P); r.FPCount > limit {
			t.Errorf("%s %s (%s): %d false positives in %d, limit %d", r.Family, r.Filter, r.Setting, r.FPCount, r.Absent, limit)
		}
	}
	if lines := strings.Count(table, "\n| "); lines != want {
		t.Errorf("%d table rows, want %d", lines, want)
	}
	ts := FamilyTargets(rows)
	if len(ts) != 3*ours {
		t.Errorf("%d targets, want %d", len(ts), 3*ours)
	}
	for _, tg := range ts {
		if !tg.Known {
			t.Errorf("target %q not computed", tg.What)
		}
	}
	t.Log("\n" + TargetsTable(ts, true))
}
