package serve

import (
	"strconv"
	"testing"
)

// BenchmarkMayContain: a lookup of 1 and of 10 items (Store.MayContain,
// BF.EXISTS and BF.MEXISTS without the protocol) in a Bloom key reserved
// for 16 M items at 1 % and a cuckoo key reserved for 1 M, each holding
// the 10 items looked up, through MayContain and ("-append") through
// AppendMayContain into a buffer reused. ns/op is per call.
//
//	go test -run '^$' -bench MayContain -count 6 ./serve/
func BenchmarkMayContain(b *testing.B) {
	s, err := Open(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.Reserve("bf", BloomParams{Capacity: 1 << 24, ErrorRate: 0.01}); err != nil {
		b.Fatal(err)
	}
	if err := s.Reserve("cf", CuckooParams{Capacity: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	its := make([][]byte, 10)
	for i := range its {
		its[i] = []byte("user" + strconv.Itoa(i) + "@example.com")
	}
	if _, stop, err := s.Add("bf", its, AddOptions{NoCreate: true}); err != nil || stop != nil {
		b.Fatal(stop, err)
	}
	if _, _, err := s.Insert("cf", its, InsertOptions{NoCreate: true}); err != nil {
		b.Fatal(err)
	}
	for _, key := range []string{"bf", "cf"} {
		for _, n := range []int{1, 10} {
			b.Run(key+"-"+strconv.Itoa(n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					held, _ := s.MayContain(key, its[:n])
					if !held[0] {
						b.Fatal("false negative")
					}
				}
			})
			// Into a buffer reused, as a front end answers (allocates nothing).
			b.Run(key+"-"+strconv.Itoa(n)+"-append", func(b *testing.B) {
				var held []bool
				b.ReportAllocs()
				for b.Loop() {
					held, _ = s.AppendMayContain(held[:0], key, its[:n])
					if !held[0] {
						b.Fatal("false negative")
					}
				}
			})
		}
	}
}
