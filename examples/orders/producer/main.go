// Command producer is the order service of the orders example: an HTTP API
// that creates, updates and cancels orders. Each change writes the order
// row and its event in one PostgreSQL transaction through
// outbox.PublishResultTx, so an order exists if and only if its event will be
// delivered. See examples/orders/README.md.
//
//	go run ./examples/orders/producer -dsn postgres://postgres@127.0.0.1:5432/test
//
// Endpoints (JSON bodies):
//
//	POST /orders               {"customer": "c-1", "total_cents": 4990}
//	POST /orders/batch         [{"customer": ...}, ...]   (one transaction)
//	PUT  /orders/{id}          {"total_cents": 5990}
//	POST /orders/{id}/cancel
//	GET  /orders/{id}
//
// A request with "fail": true writes the order and then fails inside its
// transaction, as a business rule would: the order and its event roll back
// together, and the consumer never hears of it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox/examples/orders/internal/ordertrace"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/postgres"
)

// Order is the order row, and the payload of every event about it: each
// event carries the whole order at its version, so a consumer can apply
// events in any order by keeping the highest version.
type Order struct {
	ID         int64  `json:"id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	Status     string `json:"status"`
	Version    int    `json:"version"`
}

// orderRequest is the body of a create or update.
type orderRequest struct {
	Customer   string `json:"customer"`
	TotalCents *int64 `json:"total_cents"`
	Fail       bool   `json:"fail"`
}

// errBusinessRule is the failure a request asks for with "fail": true.
var errBusinessRule = errors.New("business rule refused the order")

// errNotFound is an unknown or cancelled order.
var errNotFound = errors.New("no such open order")

type service struct {
	pool   *pgxpool.Pool
	pub    *outbox.TxPublisher[pgx.Tx]
	log    *slog.Logger
	tracer trace.Tracer
}

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	schema := flag.String("schema", "orders_example", "schema for the orders and txbox's tables")
	listen := flag.String("listen", "127.0.0.1:8081", "HTTP listen address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *dsn, *schema, *listen); err != nil {
		log.Error("producer stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, dsn, schema, listen string) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("-dsn: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil { // creates the schema too
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id bigserial PRIMARY KEY,
		customer text NOT NULL,
		total_cents bigint NOT NULL,
		status text NOT NULL,
		version int NOT NULL)`); err != nil {
		return err
	}
	// Typed for pgx.Tx: handing it the pool instead of the request's
	// transaction does not compile.
	pub, err := outbox.NewTxPublisher(st.Pgx(), outbox.Config{})
	if err != nil {
		return err
	}
	tracer, flush, err := ordertrace.Start(ctx, "orders-producer", log)
	if err != nil {
		return err
	}
	defer flush()
	s := &service{pool: pool, pub: pub, log: log, tracer: tracer}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	log.Info("producer listening", "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var req orderRequest
		if !decode(w, r, &req) {
			return
		}
		s.respond(w, r, "order-created", 0, func(ctx context.Context, tx pgx.Tx, id int64) (Order, error) {
			return create(ctx, tx, id, req)
		})
	})
	mux.HandleFunc("POST /orders/batch", func(w http.ResponseWriter, r *http.Request) {
		var reqs []orderRequest
		if !decode(w, r, &reqs) {
			return
		}
		if len(reqs) == 0 || len(reqs) > 1000 {
			problem(w, http.StatusBadRequest, "a batch holds 1 to 1000 orders")
			return
		}
		s.batch(w, r, reqs)
	})
	mux.HandleFunc("PUT /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r)
		var req orderRequest
		if !ok || !decode(w, r, &req) {
			return
		}
		s.respond(w, r, "order-updated", id, func(ctx context.Context, tx pgx.Tx, id int64) (Order, error) {
			return change(ctx, tx, id, req, "open")
		})
	})
	mux.HandleFunc("POST /orders/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r)
		if !ok {
			return
		}
		s.respond(w, r, "order-cancelled", id, func(ctx context.Context, tx pgx.Tx, id int64) (Order, error) {
			return change(ctx, tx, id, orderRequest{}, "cancelled")
		})
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, ok := pathID(w, r)
		if !ok {
			return
		}
		var o Order
		err := s.pool.QueryRow(r.Context(), `SELECT id, customer, total_cents, status, version FROM orders WHERE id = $1`, id).
			Scan(&o.ID, &o.Customer, &o.TotalCents, &o.Status, &o.Version)
		if errors.Is(err, pgx.ErrNoRows) {
			problem(w, http.StatusNotFound, "no such order")
			return
		}
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, o)
	})
	return mux
}

// respond runs one change and its event in one transaction; id 0 asks
// for a new order id.
func (s *service) respond(w http.ResponseWriter, r *http.Request, eventType string, id int64, fn func(context.Context, pgx.Tx, int64) (Order, error)) {
	// The request's span: publishing inside it puts its traceparent on
	// the event, so the relay and the consumer continue this trace.
	ctx, span := s.tracer.Start(r.Context(), r.Pattern, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	var out Order
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		o, err := publish(ctx, s.pub, tx, eventType, id, fn)
		out = o
		return err
	})
	span.SetAttributes(attribute.Int64("order.id", out.ID), attribute.String("txbox.event_type", eventType))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	s.reply(w, err, out)
}

// batch creates many orders, and their events, in one transaction.
func (s *service) batch(w http.ResponseWriter, r *http.Request, reqs []orderRequest) {
	ctx := r.Context()
	out := make([]Order, 0, len(reqs))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, req := range reqs {
			o, err := publish(ctx, s.pub, tx, "order-created", 0, func(ctx context.Context, tx pgx.Tx, id int64) (Order, error) {
				return create(ctx, tx, id, req)
			})
			if err != nil {
				return err
			}
			out = append(out, o)
		}
		return nil
	})
	s.reply(w, err, out)
}

// publish is the heart of the example: the order change and its event are
// written through the same transaction, and the event carries the result.
// The event's key is the order id, so a relay with `ordering: key` would
// also keep one order's events in order; this consumer does not need that
// (it keeps the highest version).
func publish(ctx context.Context, pub *outbox.TxPublisher[pgx.Tx], tx pgx.Tx, eventType string, id int64, fn func(context.Context, pgx.Tx, int64) (Order, error)) (Order, error) {
	if id == 0 {
		if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('orders', 'id'))`).Scan(&id); err != nil {
			return Order{}, err
		}
	}
	return outbox.PublishResultTx(ctx, pub, tx, eventType, strconv.FormatInt(id, 10), func(ctx context.Context) (Order, error) {
		return fn(ctx, tx, id)
	})
}

func create(ctx context.Context, tx pgx.Tx, id int64, req orderRequest) (Order, error) {
	if req.Customer == "" || req.TotalCents == nil || *req.TotalCents < 0 {
		return Order{}, badRequest("customer and a total_cents of 0 or more are required")
	}
	o := Order{ID: id, Customer: req.Customer, TotalCents: *req.TotalCents, Status: "open", Version: 1}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents, status, version) VALUES ($1, $2, $3, $4, $5)`,
		o.ID, o.Customer, o.TotalCents, o.Status, o.Version); err != nil {
		return Order{}, err
	}
	if req.Fail {
		return Order{}, errBusinessRule
	}
	return o, nil
}

// change updates an open order's total (status "open") or cancels it.
func change(ctx context.Context, tx pgx.Tx, id int64, req orderRequest, status string) (Order, error) {
	if status == "open" && (req.TotalCents == nil || *req.TotalCents < 0) {
		return Order{}, badRequest("a total_cents of 0 or more is required")
	}
	var o Order
	err := tx.QueryRow(ctx, `UPDATE orders SET total_cents = COALESCE($2, total_cents), status = $3, version = version + 1
		WHERE id = $1 AND status = 'open'
		RETURNING id, customer, total_cents, status, version`, id, req.TotalCents, status).
		Scan(&o.ID, &o.Customer, &o.TotalCents, &o.Status, &o.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, errNotFound
	}
	if err != nil {
		return Order{}, err
	}
	if req.Fail {
		return Order{}, errBusinessRule
	}
	return o, nil
}

// badRequest is a request the service refuses before writing anything.
type badRequest string

func (b badRequest) Error() string { return string(b) }

// reply maps a transaction's outcome to a response: the request's own
// mistakes are 4xx problem details, the database's are a 503 the caller
// may retry.
func (s *service) reply(w http.ResponseWriter, err error, v any) {
	var bad badRequest
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, v)
	case errors.As(err, &bad):
		problem(w, http.StatusBadRequest, bad.Error())
	case errors.Is(err, errNotFound):
		problem(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errBusinessRule):
		problem(w, http.StatusUnprocessableEntity, err.Error())
	default:
		s.fail(w, err)
	}
}

func (s *service) fail(w http.ResponseWriter, err error) {
	s.log.Warn("request failed", "err", err)
	problem(w, http.StatusServiceUnavailable, "the order store is unavailable; retry")
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		problem(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		problem(w, http.StatusBadRequest, "the order id must be a positive integer")
		return 0, false
	}
	return id, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// problem writes an RFC 9457 problem-details body.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}
