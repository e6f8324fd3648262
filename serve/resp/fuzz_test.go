package resp

import (
	"io"
	"net"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// FuzzCommands runs arbitrary bytes through a whole connection — parser,
// dispatch and every command handler — against a real in-memory store
// (memory-capped so that a fuzzed BF.RESERVE cannot allocate gigabytes).
// The server must not panic, and must close the connection at the end.
func FuzzCommands(f *testing.F) {
	for _, s := range []string{
		"BF.ADD k a\r\nBF.MADD k a b\r\nBF.INFO k\r\nBF.INFO k ITEMS\r\nBF.CARD k\r\n",
		"BF.RESERVE k 0.01 100 EXPANSION 3\r\nBF.INSERT k CAPACITY 10 ERROR 0.1 NONSCALING ITEMS a b\r\n",
		"CF.RESERVE c 100 BUCKETSIZE 4 MAXITERATIONS 10 EXPANSION 2\r\nCF.ADD c a\r\nCF.DEL c a\r\nCF.INFO c\r\n",
		"CF.INSERTNX c CAPACITY 100 ITEMS a b\r\nCF.COUNT c a\r\nCF.MEXISTS c a b\r\n",
		"BF.ADD k a\r\nBF.SCANDUMP k 0\r\nBF.SCANDUMP k 1\r\nBF.LOADCHUNK j 1 BGDUMP01\r\n",
		"HELLO 3\r\nBF.EXISTS k a\r\nCF.SCANDUMP c 0\r\nSCAN 0 MATCH * COUNT 5\r\nKEYS [a-\r\n",
		"CLIENT SETNAME x\r\nCOMMAND\r\nCOMMAND INFO bf.add\r\nINFO\r\nCONFIG GET *\r\nDEL k\r\n",
		"*3\r\n$12\r\nBF.LOADCHUNK\r\n$1\r\nk\r\n$1\r\n1\r\n",
		// pipelined runs, batched (batch.go)
		"*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\na\r\n*3\r\n$6\r\nbf.add\r\n$1\r\nk\r\n$1\r\nb\r\n*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$0\r\n\r\n" +
			"*3\r\n$9\r\nBF.EXISTS\r\n$1\r\nk\r\n$1\r\na\r\n*3\r\n$9\r\nBF.EXISTS\r\n$1\r\nk\r\n$1\r\nz\r\n*3\r\n$9\r\nCF.EXISTS\r\n$1\r\nk\r\n$1\r\na\r\n",
		"BG.XRESERVE x 0.001 1000 60 GENERATIONS 4\r\nBG.XADD x a EX 10\r\nBG.XMADD x PXAT 99999999999999 a b\r\nBG.XMEXISTS x a b\r\nBG.XINFO x\r\nBG.XINFO x NEXTEXPIRY\r\nBF.EXISTS x a\r\nDEL x\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := serve.Open(serve.Config{MaxMemory: 8 << 20, MaxFilterBytes: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		srv, err := New(Config{Store: st, MaxBulkLen: 1 << 16, MaxArgs: 64})
		if err != nil {
			t.Fatal(err)
		}
		client, server := net.Pipe()
		c := srv.newConn(server)
		srv.wg.Add(1)
		srv.active.Add(1)
		srv.conns[c] = struct{}{}
		go func() {
			client.Write(data)
			client.Close()
		}()
		go io.Copy(io.Discard, client)
		c.serve()
	})
}
