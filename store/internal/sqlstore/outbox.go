package sqlstore

import (
	"fmt"

	"github.com/txbox/txbox"
)

// CheckInsertEvents checks the events of a dialect's OutboxInsert before
// anything is sent: a nil event or one without an id wraps invalid (the
// dialect's ErrInvalidParams) and names its index. more, when not nil,
// adds the dialect's own checks of each event, in the same pass, so the
// first bad event is the one reported.
func CheckInsertEvents(invalid error, events []*txbox.Event, more func(i int, ev *txbox.Event) error) error {
	for i, ev := range events {
		if ev == nil {
			return fmt.Errorf("%w: event %d is nil", invalid, i)
		}
		if ev.ID == (txbox.ID{}) {
			return fmt.Errorf("%w: event %d has no id", invalid, i)
		}
		if more == nil {
			continue
		}
		if err := more(i, ev); err != nil {
			return err
		}
	}
	return nil
}
