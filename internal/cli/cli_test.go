package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestSize(t *testing.T) {
	code, out, errOut := run("size", "-n", "10000000", "-p", "0.001")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"bits 155452416", "bytes 19431552 (18.53 MiB)", "probes (k) 9", "bits/key 15.55",
		"143775876 bits (17.14 MiB)", "1.56× it", "0.5× 5000000", "1.0× 10000000 0.1%", "2.0× 20000000",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"size"},
		{"size", "-n", "0"},
		{"size", "-n", "10", "-p", "0"},
		{"size", "-n", "10", "-p", "1"},
		{"size", "-n", "10", "-p", "NaN"},
		{"size", "-n", "-5"},
		{"size", "-n", "abc"},
		{"size", "-n", "10", "extra"},
		{"size", "-bogus"},
	} {
		code, out, errOut := run(args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out != "" || !strings.Contains(errOut, "usage") {
			t.Errorf("%q: want usage on stderr only; stdout %q stderr %q", args, out, errOut)
		}
	}
	if code, _, _ := run("size", "-h"); code != 0 {
		t.Errorf("size -h: exit %d", code)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 19360448: "18.46 MiB", 3 << 30: "3.00 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDemoJSON(t *testing.T) {
	code, out, errOut := run("demo", "-users", "3000", "-duration", "200ms", "-fp", "0.01", "-json", "-quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"queries_avoided_ratio", "observed_fp_rate", "configured_fp_rate", "warm_seconds", "filter_bytes"} {
		if _, ok := res[k].(float64); !ok {
			t.Errorf("missing number %q", k)
		}
	}
	for _, phase := range []string{"without_gate", "with_gate"} {
		p, ok := res[phase].(map[string]any)
		if !ok {
			t.Fatalf("missing object %q", phase)
		}
		for _, k := range []string{"lookups_per_sec", "db_queries", "p95_miss_us", "p95_hit_us"} {
			if _, ok := p[k].(float64); !ok {
				t.Errorf("%s lacks number %q", phase, k)
			}
		}
	}
	if code, _, _ := run("demo", "-users", "0"); code != 2 {
		t.Errorf("demo -users 0: exit %d, want 2", code)
	}
	code, out, _ = run("demo", "-users", "2000", "-duration", "100ms", "-quiet")
	if code != 0 || !strings.Contains(out, "queries avoided") || !strings.Contains(out, "with gate") {
		t.Errorf("table output (exit %d):\n%s", code, out)
	}
}
