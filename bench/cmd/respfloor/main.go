// Command respfloor is the floor of a Go server with one goroutine per
// connection: it answers ":0" to every RESP command of three arguments
// (BF.EXISTS key item) without looking at it, with the buffering `bloomgate
// serve` uses (a 64 KiB reader; replies flushed when the reader is empty).
// bench/serve.sh measures it beside bloomgate with RESPFLOOR=1: what
// bloomgate costs above it is its own work; what it costs above
// redis-server is the runtime's (netpoller, scheduler, a read that finds
// nothing before each wait).
//
// With -loop it answers the same from gnet's event loops instead (one per
// core, epoll over all connections, as redis-server): the floor of an
// event-loop server, which bench/serve.sh measures with RESPFLOOR=loop.
//
//	respfloor [-loop] 127.0.0.1:PORT
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/panjf2000/gnet/v2"
)

func main() {
	loop := flag.Bool("loop", false, "answer from gnet's event loops")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: respfloor [-loop] ADDR")
		os.Exit(2)
	}
	if *loop {
		err := gnet.Run(&loopFloor{}, "tcp://"+flag.Arg(0), gnet.WithMulticore(true))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c)
	}
}

func serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 16<<10)
	for {
		for range 7 { // "*3", then three "$n" and value lines
			if _, err := br.ReadSlice('\n'); err != nil {
				return
			}
		}
		bw.WriteString(":0\r\n")
		if br.Buffered() == 0 && bw.Flush() != nil {
			return
		}
	}
}

// loopFloor answers each complete command in what a connection's read
// brought, with one write for all of them.
type loopFloor struct {
	gnet.BuiltinEventEngine
}

func (f *loopFloor) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Peek(-1)
	used, cmds := 0, 0
	for n := commandLen(buf); n > 0; n = commandLen(buf[used:]) {
		used += n
		cmds++
	}
	c.Discard(used)
	if cmds > 0 {
		c.Write(bytes.Repeat([]byte(":0\r\n"), cmds))
	}
	return gnet.None
}

// commandLen is the length of the complete command at the start of b (seven
// lines: "*3", then three "$n" and value lines), or 0.
func commandLen(b []byte) int {
	n := 0
	for range 7 {
		i := bytes.IndexByte(b[n:], '\n')
		if i < 0 {
			return 0
		}
		n += i + 1
	}
	return n
}
