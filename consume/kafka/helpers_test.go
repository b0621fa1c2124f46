package kafka_test

import (
	"time"

	"github.com/txbox/txbox/consume"
)

// consumeBackoff keeps injected failures fast to retry.
var consumeBackoff = consume.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}
