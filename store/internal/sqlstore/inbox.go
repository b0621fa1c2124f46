package sqlstore

import (
	"fmt"

	"github.com/txbox/txbox/store"
)

// CheckInboxRecord checks the params of a dialect's InboxRecord before
// anything is sent: nil params wrap invalid (the dialect's
// ErrInvalidParams), a bad consumer name is store.ValidateConsumerName's
// error under the dialect's name.
func CheckInboxRecord(dialect string, invalid error, params *store.InboxRecordParams) error {
	if params == nil {
		return fmt.Errorf("%w: nil InboxRecordParams", invalid)
	}
	if err := store.ValidateConsumerName(params.Consumer); err != nil {
		return fmt.Errorf("%s: inbox record: %w", dialect, err)
	}
	return nil
}
