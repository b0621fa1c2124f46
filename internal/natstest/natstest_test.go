package natstest_test

import (
	"context"
	"testing"

	"github.com/txbox/txbox/internal/natstest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestJetStreamAnswers: the returned context talks to the server's
// JetStream (its account info needs JetStream enabled).
func TestJetStreamAnswers(t *testing.T) {
	t.Parallel()
	js := natstest.JetStream(t, testenv.NATSURL)
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("account info: %v", err)
	}
}
