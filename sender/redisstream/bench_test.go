package redisstream_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/sendertest"
)

// BenchmarkSendVsRaw sends the same batch of 200 messages through the txbox
// sender and through a bare go-redis pipeline of the same XADDs (same
// fields, same MAXLEN ~), alternating the two in every iteration so both
// see the same machine load. It reports each side's rate and the ratio
// sender/raw of their total times.
func BenchmarkSendVsRaw(b *testing.B) {
	const batch = 200
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	defer rdb.Close()
	stream := testenv.UniqueName("bench_stream_")
	defer rdb.Del(context.Background(), stream)
	s, err := redisstream.New(redisstream.Config{Addr: testenv.RedisAddr, MaxLen: 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	msgs := sendertest.NewMessages(batch, sender.Route{Stream: stream})

	rawBatch := func() {
		pipe := rdb.Pipeline()
		for _, m := range msgs {
			hj, _ := json.Marshal(m.Headers)
			pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, MaxLen: 1000, Approx: true,
				Values: []any{"id", m.ID.String(), "type", m.EventType, "key", m.Key, "payload", m.Payload, "headers", hj}})
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	sendertest.SendVsRaw(b, s, msgs, rawBatch)
}
