package postgres

import "sync"

// pipelineChunk is how much COPY output the reading goroutine gathers before
// handing it to the decoding one. PostgreSQL sends one CopyData message per
// row, so rows are batched: a handoff per row would cost more than the row.
const pipelineChunk = 64 << 10

// pipeline is the io.Writer a COPY streams into when decoding runs on a
// goroutine of its own: the connection's reader keeps receiving (on one core)
// while rows are split, unescaped and handed to fn (on another). Chunks keep
// their order; memory is bounded by a few chunks in flight.
type pipeline struct {
	d    *copyDecoder
	ch   chan []byte // chunks to decode, in order
	free chan []byte // decoded chunks, for reuse
	cur  []byte
	done chan struct{}

	mu  sync.Mutex
	err error // the decoder's first error; stops the COPY at the next Write
}

func newPipeline(d *copyDecoder) *pipeline {
	p := &pipeline{d: d, ch: make(chan []byte, 4), free: make(chan []byte, 6), done: make(chan struct{})}
	p.cur = make([]byte, 0, pipelineChunk+pipelineChunk/4)
	go p.decode()
	return p
}

func (p *pipeline) decode() {
	defer close(p.done)
	for b := range p.ch {
		if p.failed() == nil {
			if _, err := p.d.Write(b); err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
			}
		}
		select {
		case p.free <- b[:0]:
		default:
		}
	}
}

func (p *pipeline) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Write gathers b into the current chunk and hands full chunks over.
func (p *pipeline) Write(b []byte) (int, error) {
	if err := p.failed(); err != nil {
		return 0, err
	}
	p.cur = append(p.cur, b...)
	if len(p.cur) >= pipelineChunk {
		p.flush()
	}
	return len(b), nil
}

func (p *pipeline) flush() {
	if len(p.cur) == 0 {
		return
	}
	p.ch <- p.cur
	select {
	case p.cur = <-p.free:
	default:
		p.cur = make([]byte, 0, pipelineChunk+pipelineChunk/4)
	}
}

// close hands over the last chunk, waits until everything is decoded, and
// returns the decoder's first error.
func (p *pipeline) close() error {
	p.flush()
	close(p.ch)
	<-p.done
	return p.failed()
}
