package admin

import (
	"log/slog"
	"net/http"
	"time"
)

// DefaultListen is the admin server's default address: loopback only.
const DefaultListen = "127.0.0.1:8089"

// Timeouts of NewServer. ReadHeaderTimeout is what stops a client that
// opens connections and sends headers a byte at a time (Slowloris).
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = time.Minute
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
)

// NewServer returns an http.Server for h on addr with the timeouts and
// header limit above, its own errors logged to logger at WARN.
func NewServer(addr string, h http.Handler, logger *slog.Logger) *http.Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.With(slog.String("component", "txbox.admin")).Handler(), slog.LevelWarn),
	}
}
