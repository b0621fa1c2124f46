package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
)

// Machine describes where the figures were measured: the machine is
// shared, so the load average before and after is part of every result.
type Machine struct {
	CPU          string `json:"cpu"`
	Cores        int    `json:"cores"`
	MemoryGiB    string `json:"memory_gib"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	PostgreSQL   string `json:"postgresql"`
	MariaDB      string `json:"mariadb,omitempty"`
	NATS         string `json:"nats"`
	LoadBefore   string `json:"load_average_before"`
	LoadAfter    string `json:"load_average_after"`
	TxboxVersion string `json:"txbox_version,omitempty"`
}

func readFirst(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

func loadAverage() string {
	f := strings.Fields(readFirst("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memory() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

// describeMachine collects the machine details; a service that does not
// answer is reported as such, not left out.
func describeMachine(ctx context.Context, o *Options) Machine {
	m := Machine{
		CPU: cpuModel(), Cores: runtime.NumCPU(), MemoryGiB: memory(),
		Kernel: readFirst("/proc/sys/kernel/osrelease"), GoVersion: runtime.Version(), LoadBefore: loadAverage(),
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c, err := pgx.Connect(cctx, o.DSN); err != nil {
		m.PostgreSQL = "unreachable: " + err.Error()
	} else {
		_ = c.QueryRow(cctx, "SELECT version()").Scan(&m.PostgreSQL)
		_ = c.Close(cctx)
	}
	if nc, err := nats.Connect(o.NATSURL, nats.Timeout(3*time.Second)); err != nil {
		m.NATS = "unreachable: " + err.Error()
	} else {
		m.NATS = "nats-server " + nc.ConnectedServerVersion()
		nc.Close()
	}
	if db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/"); err == nil {
		var v string
		if db.QueryRowContext(cctx, "SELECT VERSION()").Scan(&v) == nil {
			m.MariaDB = v + " (not used by the scenarios yet)"
		}
		db.Close()
	}
	return m
}

func (m Machine) markdown(b *strings.Builder) {
	b.WriteString("## Machine\n\n")
	rows := [][2]string{
		{"CPU", fmt.Sprintf("%s, %d cores", m.CPU, m.Cores)}, {"memory", m.MemoryGiB + " GiB"}, {"kernel", m.Kernel},
		{"Go", m.GoVersion}, {"txbox", m.TxboxVersion}, {"PostgreSQL", m.PostgreSQL}, {"MariaDB", m.MariaDB}, {"NATS", m.NATS},
		{"load average before (1, 5, 15 min)", m.LoadBefore}, {"load average after", m.LoadAfter},
	}
	for _, r := range rows {
		if r[1] != "" {
			fmt.Fprintf(b, "- %s: %s\n", r[0], r[1])
		}
	}
}
