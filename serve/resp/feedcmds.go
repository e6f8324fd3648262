package resp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/internal/version"
)

// Read-your-writes commands for table-backed sets that follow a change
// feed. The position is the writer's token, taken after its commit, in the
// store's notation (serve.Config.Positions) or as a decimal integer; for
// PostgreSQL source/postgres.WritePosition says which position to take.

// cmdBFExistsAt: BF.EXISTSAT set item position — 0 only if item is
// definitely absent with every transaction up to position applied.
func cmdBFExistsAt(c *conn, args [][]byte) {
	pos, err := c.s.store.ParsePosition(string(args[3]))
	if err != nil {
		c.replyErr(err)
		return
	}
	ok, err := c.s.store.MayContainAt(string(args[1]), args[2], pos)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bool(ok)
}

// cmdBGExistsAt: BG.EXISTSAT set key position — BG.EXISTS as of position.
func cmdBGExistsAt(c *conn, args [][]byte) {
	pos, err := c.s.store.ParsePosition(string(args[3]))
	if err != nil {
		c.replyErr(err)
		return
	}
	ok, err := c.s.store.HasAt(context.Background(), string(args[1]), string(args[2]), pos)
	if err != nil {
		c.replyErr(err)
		return
	}
	c.w.bool(ok)
}

// infoBloomgate writes INFO's bloomgate sections: the build, and one line
// per table-backed set with its mode, role, state, position, lag, filter
// generation and reason.
func (c *conn) infoBloomgate(b *strings.Builder) {
	v := version.Get()
	fmt.Fprintf(b, "# Bloomgate\r\nbloomgate_version:%s\r\nbloomgate_revision:%s\r\nbloomgate_go_version:%s\r\n\r\n",
		v.Version, v.Revision, v.GoVersion)
	b.WriteString("# Sets\r\n")
	for _, set := range c.s.store.Sets() {
		st := set.Status()
		ready := 0
		if st.Ready {
			ready = 1
		}
		// The reason is free text: keep the line one INFO field.
		reason := strings.NewReplacer(",", ";", "\r", " ", "\n", " ").Replace(st.Reason)
		fmt.Fprintf(b, "set_%s:mode=%s,role=%s,state=%s,ready=%d,position=%s,lag_ms=%d,generation=%d,reason=%s\r\n",
			set.Name(), st.Mode, st.Role, st.State, ready, c.s.store.FormatPosition(st.Position), st.Lag/time.Millisecond, st.Generation, reason)
	}
	b.WriteString("\r\n")
}
