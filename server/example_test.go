package server_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/server"
)

// Start a server in this process, listening on a port the system picks,
// and ask it over the Redis protocol. The zero Config keeps filters in
// memory and declares no table-backed set.
func Example() {
	ctx := context.Background()
	srv, err := server.Start(ctx, server.Config{RESP: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	rdb := redis.NewClient(&redis.Options{Addr: srv.RESPAddr().String()})
	defer rdb.Close()
	added, err := rdb.BFAdd(ctx, "seen", "alice@example.com").Result()
	if err != nil {
		log.Fatal(err)
	}
	alice, _ := rdb.BFExists(ctx, "seen", "alice@example.com").Result()
	bob, _ := rdb.BFExists(ctx, "seen", "bob@example.com").Result()
	fmt.Println("added:", added)
	fmt.Println("alice:", alice)
	fmt.Println("bob:", bob)
	// Output:
	// added: true
	// alice: true
	// bob: false
}
