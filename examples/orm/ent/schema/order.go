// Package schema is the ent schema of the ORM examples: one entity, an
// order, enough to show ent's transaction carrying an outbox event.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is an order row: who placed it and its total.
type Order struct {
	ent.Schema
}

// Fields of the order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("customer"),
		field.Int64("total_cents"),
	}
}
