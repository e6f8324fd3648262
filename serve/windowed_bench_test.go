package serve

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkExpiringMemory measures an expiring key sized for 1 M live
// revocations at 0.1 %: revocations arrive at a steady 1 M per max TTL (one
// hour), each with the max TTL, on an injected clock, for two max TTLs. It
// reports the bytes held after the first and the second max TTL, per live
// item, and the false-positive rate measured on 200,000 ids never added.
//
//	go test -run '^$' -bench BenchmarkExpiringMemory -benchtime 1x ./serve/
func BenchmarkExpiringMemory(b *testing.B) {
	const live = 1_000_000
	const maxTTL = time.Hour
	const steps = 360 // 10 s each
	for b.Loop() {
		clock := newFakeClock()
		s, err := Open(Config{Now: clock.Now})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Reserve("revoked", ExpiringParams{MaxTTL: maxTTL, Capacity: live, ErrorRate: 0.001}); err != nil {
			b.Fatal(err)
		}
		id := 0
		per := live / steps
		var held [2]int64
		for round := range 2 {
			for range steps {
				its := make([][]byte, per)
				for i := range its {
					its[i] = fmt.Appendf(nil, "jti-%d", id)
					id++
				}
				if _, err := s.AddUntil("revoked", its, clock.Now().Add(maxTTL)); err != nil {
					b.Fatal(err)
				}
				clock.Advance(maxTTL / steps)
				s.expireAll()
			}
			held[round] = s.UsedMemory()
		}
		absent := items("never-", 200_000)
		got, _ := expiringHeld(s.MayContain("revoked", absent))
		fp := 0
		for _, ok := range got {
			if ok {
				fp++
			}
		}
		b.ReportMetric(float64(held[0]), "bytes-after-1-TTL")
		b.ReportMetric(float64(held[1]), "bytes-after-2-TTL")
		b.ReportMetric(float64(held[1])/live, "bytes/live-item")
		b.ReportMetric(float64(held[1])/float64(held[0]), "churn-ratio")
		b.ReportMetric(100*float64(fp)/float64(len(absent)), "fp-%")
		s.Close()
	}
}
