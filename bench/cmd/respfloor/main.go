// Command respfloor is the floor of a Go server with one goroutine per
// connection: it answers ":0" to every RESP command of three arguments
// (BF.EXISTS key item) without looking at it, with the buffering `bloomgate
// serve` uses (a 64 KiB reader; replies flushed when the reader is empty).
// bench/serve.sh measures it beside bloomgate with RESPFLOOR=1: what
// bloomgate costs above it is its own work; what it costs above
// redis-server is the runtime's (netpoller, scheduler, a read that finds
// nothing before each wait).
//
//	respfloor 127.0.0.1:PORT
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: respfloor ADDR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[1])
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
