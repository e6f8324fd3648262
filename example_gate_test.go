package bloomgate_test

import (
	"context"
	"fmt"

	"github.com/bloomgate/bloomgate"
)

// table is a Source over an in-memory list of keys. A real gate reads its
// table through source/postgres or source/sqlite.
type table []string

func (t table) Scan(ctx context.Context, fn func(key []byte) error) error {
	for _, k := range t {
		if err := fn([]byte(k)); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (t table) Estimate(ctx context.Context) (int64, error) { return int64(len(t)), nil }

// A gate in front of a users table: lookups of e-mails that are not in the
// table never reach the database.
func Example() {
	ctx := context.Background()
	users := table{"alice@example.com", "bob@example.com"}
	g, err := bloomgate.New(bloomgate.Config{Source: users, Normalizer: bloomgate.LowerTrim})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	if err := g.Warm(ctx); err != nil { // Run warms and then keeps the filter fresh
		panic(err)
	}

	queries := 0
	findUser := func(email string) {
		_, found, err := bloomgate.Lookup(ctx, g, email, func(ctx context.Context) (string, bool, error) {
			queries++ // the database query: SELECT … WHERE email = lower(trim($1))
			for _, u := range users {
				if u == email {
					return u, true, nil
				}
			}
			return "", false, nil
		})
		fmt.Printf("%-20s found=%-5v err=%v queries so far=%d\n", email, found, err, queries)
	}
	findUser("alice@example.com")   // maybe present: the database answers
	findUser("mallory@example.com") // definitely absent: no query
	findUser("eve@example.com")     // definitely absent: no query

	// A new row: Add before its transaction commits.
	if err := g.AddString(" Carol@Example.com "); err != nil {
		panic(err)
	}
	fmt.Println("carol maybe present:", g.MayContainString("carol@example.com"))
	fmt.Println("ready:", g.Ready())
	// Output:
	// alice@example.com    found=true  err=<nil> queries so far=1
	// mallory@example.com  found=false err=<nil> queries so far=1
	// eve@example.com      found=false err=<nil> queries so far=1
	// carol maybe present: true
	// ready: true
}
