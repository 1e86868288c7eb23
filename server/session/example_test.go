package session_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"termlink/server/session"
)

func Example() {
	workspace, err := os.MkdirTemp("", "workspace")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(workspace)

	store, err := session.Open(filepath.Join(workspace, "sessions"), session.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	key := "terminal-dev:local:device-001"
	err = store.Append(ctx, key,
		session.Record{Role: "user", Content: "hi", MessageID: "m-1"},
		session.Record{Role: "assistant", Content: "You said: hi", MessageID: "m-1", RunID: "run-1", FinishReason: "stop"},
	)
	if err != nil {
		log.Fatal(err)
	}

	// At start-up: rebuild the dedupe table from every session.
	err = store.Scan(func(s *session.Session) error {
		for _, r := range s.Records {
			fmt.Printf("%s %s %s: %s\n", s.Meta.Key, r.MessageID, r.Role, r.Content)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// terminal-dev:local:device-001 m-1 user: hi
	// terminal-dev:local:device-001 m-1 assistant: You said: hi
}
