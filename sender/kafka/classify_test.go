package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want txbox.ErrorClass
	}{
		{kerr.UnknownTopicOrPartition, txbox.ClassRejected},
		{fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge), txbox.ClassPermanent},
		{kerr.RecordListTooLarge, txbox.ClassPermanent},
		{kerr.InvalidTopicException, txbox.ClassRejected},
		{kerr.InvalidRecord, txbox.ClassRejected},
		{kerr.TopicAuthorizationFailed, txbox.ClassRejected},
		{kerr.ClusterAuthorizationFailed, txbox.ClassTransient},
		{kerr.SaslAuthenticationFailed, txbox.ClassTransient},
		{kerr.NotEnoughReplicas, txbox.ClassTransient},
		{kerr.NotLeaderForPartition, txbox.ClassTransient},
		{kgo.ErrRecordTimeout, txbox.ClassTransient},
		{kgo.ErrRecordRetries, txbox.ClassTransient},
		{context.DeadlineExceeded, txbox.ClassTransient},
		{io.EOF, txbox.ClassTransient},
		{errors.New("dial tcp: connection refused"), txbox.ClassTransient},
	} {
		if got := txbox.Classify(classify(c.err)); got != c.want {
			t.Errorf("classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
}
