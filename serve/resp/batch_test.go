package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// encode writes commands as RESP arrays of bulk strings.
func encode(cmds [][]string) []byte {
	var b []byte
	for _, args := range cmds {
		b = append(strconv.AppendInt(append(b, '*'), int64(len(args)), 10), "\r\n"...)
		for _, a := range args {
			b = append(strconv.AppendInt(append(b, '$'), int64(len(a)), 10), "\r\n"...)
			b = append(append(b, a...), "\r\n"...)
		}
	}
	return b
}

// batchScript mixes runs of BF.ADD, BF.EXISTS and CF.EXISTS on one key
// (which are batched) with what ends or breaks a batch: another key, another command,
// a key of another kind, a missing key, and a non-scaling filter that fills
// up in the middle of a run.
func batchScript() [][]string {
	cmds := [][]string{
		{"BF.RESERVE", "small", "0.01", "8", "NONSCALING"},
		{"CF.ADD", "cf", "x"},
	}
	for i := range 20 {
		cmds = append(cmds, []string{"BF.ADD", "small", "item" + strconv.Itoa(i%14)})
	}
	for i := range 20 {
		cmds = append(cmds, []string{"bf.exists", "small", "item" + strconv.Itoa(i)})
	}
	for i := range 30 {
		key := "grow"
		if i%7 == 3 {
			key = "other"
		}
		cmds = append(cmds, []string{"bf.add", key, "x" + strconv.Itoa(i%11)})
		if i%10 == 9 {
			cmds = append(cmds, []string{"BF.EXISTS", "grow", "x1"}, []string{"BF.CARD", "grow"})
		}
	}
	for range 3 {
		cmds = append(cmds, []string{"BF.ADD", "cf", "y"}, []string{"BF.EXISTS", "cf", "x"})
	}
	for i := range 6 {
		cmds = append(cmds, []string{"CF.EXISTS", "cf", "x"}, []string{"cf.exists", "cf", "y" + strconv.Itoa(i)})
	}
	for i := range 4 {
		cmds = append(cmds, []string{"CF.EXISTS", "grow", "x"}, []string{"CF.EXISTS", "cf", "x" + strconv.Itoa(i)})
	}
	for i := range 5 {
		cmds = append(cmds, []string{"BF.EXISTS", "missing", strconv.Itoa(i)}, []string{"BF.ADD", "small", "item1"})
	}
	return append(cmds, []string{"BF.CARD", "small"}, []string{"BF.CARD", "grow"}, []string{"BF.EXISTS", "grow"})
}

// TestPipelinedBatchReplies: a pipeline sent in one write gets, byte for
// byte, the replies the same commands get one at a time.
func TestPipelinedBatchReplies(t *testing.T) {
	cmds := batchScript()
	single, _ := startServer(t, Config{}, serve.Config{})
	nc, err := net.Dial("tcp", single)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	var want []byte
	for _, args := range cmds {
		if _, err := nc.Write(encode([][]string{args})); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadBytes('\n') // every reply in the script is one line
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, line...)
	}
	// The reference, checked where it is known: eight items fill "small",
	// the ninth is refused, and each of the eight is then held.
	head := "+OK\r\n:1\r\n" + strings.Repeat(":1\r\n", 8) + "-ERR non scaling filter is full\r\n"
	exists := strings.Repeat(":1\r\n", 8)
	if i := 2 + 20; !strings.HasPrefix(string(want), head) ||
		!strings.HasPrefix(strings.Join(strings.SplitAfter(string(want), "\r\n")[i:], ""), exists) ||
		!bytes.Contains(want, []byte("WRONGTYPE")) {
		t.Fatalf("the script should fill a filter and provoke a wrong type; one at a time:\n%s", want)
	}

	pipelined, _ := startServer(t, Config{}, serve.Config{})
	got := rawExchange(t, pipelined, string(encode(cmds)))
	if got != string(want) {
		gl, wl := strings.Split(got, "\r\n"), strings.Split(string(want), "\r\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("reply %d (%v): pipelined %q, one at a time %q", i, cmds[min(i, len(cmds)-1)], gl[i], wl[i])
			}
		}
		t.Fatalf("pipelined %d replies, one at a time %d", len(gl), len(wl))
	}
}

// TestPipelinedAddsDurable: BF.ADDs answered as one batch are in the log: a
// store reopened from its data directory holds every item acknowledged.
func TestPipelinedAddsDurable(t *testing.T) {
	dir := t.TempDir()
	st, err := serve.Open(serve.Config{DataDir: dir, Fsync: serve.FsyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startServer(t, Config{Store: st}, serve.Config{})
	// A false positive would answer 0: none at this error rate, for these
	// items.
	if err := st.Reserve("k", serve.BloomParams{ErrorRate: 0.00001, Capacity: 100000}); err != nil {
		t.Fatal(err)
	}
	var cmds [][]string
	for i := range 500 {
		cmds = append(cmds, []string{"BF.ADD", "k", "item" + strconv.Itoa(i)})
	}
	got := rawExchange(t, addr, string(encode(cmds)))
	if want := strings.Repeat(":1\r\n", 500); got != want {
		t.Fatalf("replies %q", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = serve.Open(serve.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	items := make([][]byte, 500)
	for i := range items {
		items[i] = []byte("item" + strconv.Itoa(i))
	}
	held, _ := st.MayContain("k", items)
	for i, h := range held {
		if !h {
			t.Fatalf("item%d acknowledged, missing after reopening", i)
		}
	}
}

func TestPeekCommand3(t *testing.T) {
	ok := "*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$0\r\n\r\nrest"
	args, n, found := peekCommand3([]byte(ok), 100)
	if !found || n != len(ok)-4 || string(args[0]) != "BF.ADD" || string(args[1]) != "k" || len(args[2]) != 0 {
		t.Fatalf("%q: %q %d %v", ok, args, n, found)
	}
	for _, s := range []string{
		"", "*3\r\n", "*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\nx", // incomplete
		"*2\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n",          // two arguments
		"*3\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\nx\r\n", // LF only: the reader's business
		"*3\r\n$-1\r\n$1\r\nk\r\n$1\r\nx\r\n",
		"*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$101\r\n" + strings.Repeat("x", 101) + "\r\n", // past maxBulk
		"*3\r\n$6\r\nBF.ADD\r\n$1\r\nkx\r\n$1\r\nx\r\n",                                 // length wrong
		"*3\r\n$99999999999\r\n",
	} {
		if _, _, found := peekCommand3([]byte(s), 100); found {
			t.Errorf("%q: parsed", s)
		}
	}
}

// FuzzPeekCommand3: what peekCommand3 parses, the connection's reader reads
// the same way, to the byte.
func FuzzPeekCommand3(f *testing.F) {
	f.Add([]byte("*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\nx\r\n"))
	f.Add([]byte("*3\r\n$0\r\n\r\n$0\r\n\r\n$3\r\na\r\n\r\n*1"))
	f.Add([]byte("*3\r\n$01\r\nA\r\n$1\r\nk\r\n$1\r\nx\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxBulk = 64
		args, n, ok := peekCommand3(data, maxBulk)
		if !ok {
			return
		}
		r := reader{br: bufio.NewReader(bytes.NewReader(data[:n])), maxBulk: maxBulk, maxArgs: 16, maxInline: 1 << 10}
		got, err := r.next()
		if err != nil {
			t.Fatalf("%q: peeked %q, the reader fails: %v", data[:n], args, err)
		}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", args[:]) {
			t.Fatalf("%q: peeked %q, the reader reads %q", data[:n], args, got)
		}
		if _, err := r.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%q: peeked %d bytes, the reader reads more: %v", data, n, err)
		}
	})
}
